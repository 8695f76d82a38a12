//! Classic consumer groups against the real `keel` binary.
//!
//! With librdkafka (the `rdkafka` crate, `group.protocol=classic`): three consumers split a
//! six-partition topic, a fourth joins, one leaves, one is killed without leaving (a helper
//! process, SIGKILLed) and the rest take its partitions after the session timeout; a group
//! that commits after processing while a rebalance happens processes every record at least
//! once and ends with its committed offsets at the high watermarks; cooperative-sticky never
//! revokes a partition that stays with its member.
//!
//! With the raw client: the member and generation checks of Heartbeat, SyncGroup and
//! OffsetCommit, an inconsistent protocol type, a JoinGroup parked while another member keeps
//! heartbeating on the same shard, batched LeaveGroup, DescribeGroups, ListGroups, OffsetDelete
//! of a subscribed topic and DeleteGroups.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

const PARTITIONS: i32 = 6;

/// Set (to "1") in the helper process that joins a group and waits to be killed.
const MEMBER_ROLE_ENV: &str = "TEST_GROUP_MEMBER";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let res = block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
}

fn config(bootstrap: &str, group: &str, strategy: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", "classic")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        // The rebalance timeout: a member killed while its JoinGroup waits holds a rebalance
        // this long at most.
        .set("max.poll.interval.ms", "15000")
        .set("partition.assignment.strategy", strategy)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50")
        .set("topic.metadata.refresh.interval.ms", "1000");
    c
}

fn consumer(bootstrap: &str, group: &str, strategy: &str, topic: &str) -> BaseConsumer {
    let c: BaseConsumer = config(bootstrap, group, strategy).create().unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

/// The partitions a consumer holds now.
fn assignment<C: ConsumerContext>(c: &BaseConsumer<C>) -> BTreeSet<i32> {
    c.assignment()
        .map(|tpl| tpl.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer (they rebalance only while polled) until `done` holds for their
/// assignments; panics with the assignments after `timeout`.
fn poll_until<C: ConsumerContext>(
    consumers: &[&BaseConsumer<C>],
    timeout: Duration,
    what: &str,
    done: impl Fn(&[BTreeSet<i32>]) -> bool,
) -> Vec<BTreeSet<i32>> {
    let deadline = Instant::now() + timeout;
    loop {
        for c in consumers {
            let _ = c.poll(Duration::from_millis(10));
        }
        let now: Vec<BTreeSet<i32>> = consumers.iter().map(|c| assignment(c)).collect();
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; assignments {now:?}"
        );
    }
}

/// Disjoint, covering every partition, each member holding between `min` and `max`.
fn split_evenly(a: &[BTreeSet<i32>], min: usize, max: usize) -> bool {
    let total: usize = a.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<i32> = a.iter().flatten().copied().collect();
    total == PARTITIONS as usize
        && union == (0..PARTITIONS).collect()
        && a.iter().all(|s| (min..=max).contains(&s.len()))
}

/// The helper process: joins the group named by the environment and polls until killed.
/// In a normal test run (no `TEST_GROUP_MEMBER`) it does nothing.
#[test]
fn group_member_helper_process() {
    if std::env::var(MEMBER_ROLE_ENV).as_deref() != Ok("1") {
        return;
    }
    let env = |k: &str| std::env::var(k).unwrap();
    let c = consumer(
        &env("TEST_GROUP_BOOTSTRAP"),
        &env("TEST_GROUP_ID"),
        "range",
        &env("TEST_GROUP_TOPIC"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let _ = c.poll(Duration::from_millis(50));
    }
}

/// A helper process in the group; SIGKILLed when dropped, if still running.
struct MemberProcess(Child);

impl MemberProcess {
    fn spawn(bootstrap: &str, group: &str, topic: &str) -> MemberProcess {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "group_member_helper_process", "--nocapture"])
            .env(MEMBER_ROLE_ENV, "1")
            .env("TEST_GROUP_BOOTSTRAP", bootstrap)
            .env("TEST_GROUP_ID", group)
            .env("TEST_GROUP_TOPIC", topic)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        MemberProcess(child)
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[test]
fn members_join_leave_and_die_and_the_partitions_follow() {
    let b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    create_topic(&bootstrap, "orders", PARTITIONS);
    let (g, t) = ("g-range", "orders");
    let c1 = consumer(&bootstrap, g, "range", t);
    let c2 = consumer(&bootstrap, g, "range", t);
    let c3 = consumer(&bootstrap, g, "range", t);
    poll_until(
        &[&c1, &c2, &c3],
        Duration::from_secs(30),
        "3 members",
        |a| split_evenly(a, 2, 2),
    );

    // A fourth member: everyone rebalances, each holds one or two.
    let c4 = consumer(&bootstrap, g, "range", t);
    poll_until(
        &[&c1, &c2, &c3, &c4],
        Duration::from_secs(30),
        "4 members",
        |a| split_evenly(a, 1, 2),
    );

    // One closes (LeaveGroup): its partitions go to the others at once.
    drop(c4);
    poll_until(
        &[&c1, &c2, &c3],
        Duration::from_secs(30),
        "after a leave",
        |a| split_evenly(a, 2, 2),
    );

    // A member killed without leaving: its partitions move after its session timeout.
    let mut helper = MemberProcess::spawn(&bootstrap, g, t);
    poll_until(
        &[&c1, &c2, &c3],
        Duration::from_secs(30),
        "the helper's join",
        |a| {
            let held: usize = a.iter().map(BTreeSet::len).sum();
            held < PARTITIONS as usize && a.iter().all(|s| !s.is_empty())
        },
    );
    helper.kill9();
    let killed = Instant::now();
    poll_until(
        &[&c1, &c2, &c3],
        Duration::from_secs(30),
        "after a kill",
        |a| split_evenly(a, 2, 2),
    );
    // Not before the session timeout (6 s) ran out, less the heartbeat interval.
    assert!(
        killed.elapsed() >= Duration::from_millis(5_000),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn commit_after_processing_through_a_rebalance_loses_nothing() {
    let b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    let (g, t) = ("g-commit", "payments");
    create_topic(&bootstrap, t, PARTITIONS);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .set("enable.idempotence", "false")
        .create()
        .unwrap();
    // Keys key-0.. over the partitions in turn (100 per partition in all); the value names
    // the key, so processing can check what it reads.
    let produce = |keys: std::ops::Range<i32>| {
        for i in keys {
            let key = format!("key-{i}");
            let value = format!("value-{i}");
            let record = BaseRecord::to(t)
                .partition(i % PARTITIONS)
                .key(&key)
                .payload(&value);
            producer.send(record).map_err(|(e, _)| e).unwrap();
            producer.poll(Duration::ZERO);
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    };
    produce(0..300);

    let member = || {
        let c: BaseConsumer = config(&bootstrap, g, "range")
            .set("enable.auto.offset.store", "false")
            .create()
            .unwrap();
        c.subscribe(&[t]).unwrap();
        c
    };
    let checker: BaseConsumer = config(&bootstrap, g, "range").create().unwrap();
    let mut all = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        all.add_partition(t, p);
    }
    let mut consumers = vec![member(), member()];
    let mut processed: BTreeSet<String> = BTreeSet::new();
    let mut deliveries = 0usize;
    let mut per_member = [0usize; 3];
    let mut produced_all = false;
    let mut last_commit = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        for (i, c) in consumers.iter().enumerate() {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(5)) {
                // "Processing": the key must match the value, then the record counts.
                let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_string();
                let value = std::str::from_utf8(m.payload().unwrap()).unwrap();
                assert_eq!(key.replace("key-", "value-"), value);
                std::thread::sleep(Duration::from_millis(5));
                processed.insert(key);
                deliveries += 1;
                per_member[i] += 1;
                c.store_offset_from_message(&m).unwrap();
            }
        }
        // A third member joins midway: a rebalance while records are being processed. Once it
        // holds partitions, the second half is produced, so it has records to process too.
        if consumers.len() == 2 && processed.len() >= 200 {
            consumers.push(member());
        }
        if consumers.len() == 3 && !produced_all && !assignment(&consumers[2]).is_empty() {
            produce(300..600);
            produced_all = true;
        }
        if last_commit.elapsed() >= Duration::from_millis(100) {
            last_commit = Instant::now();
            for c in &consumers {
                // Fails while rebalancing (nothing stored, or fenced): the records are then
                // processed again by their next owner.
                let _ = c.commit_consumer_state(CommitMode::Sync);
            }
            if produced_all && processed.len() == 600 {
                let committed = checker
                    .committed_offsets(all.clone(), Duration::from_secs(5))
                    .unwrap();
                let at_end = committed
                    .elements()
                    .iter()
                    .all(|e| e.offset() == Offset::Offset(100));
                if at_end {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "processed {} of 600 ({deliveries} deliveries)",
            processed.len()
        );
    }
    assert_eq!(consumers.len(), 3);
    let expected: BTreeSet<String> = (0..600).map(|i| format!("key-{i}")).collect();
    assert_eq!(processed, expected);
    assert!(deliveries >= 600);
    // The member that joined midway processed records of the partitions it took over.
    assert!(per_member[2] > 0, "{per_member:?}");
}

/// Records every partition a consumer was told to give up.
#[derive(Clone, Default)]
struct Revocations(Arc<Mutex<Vec<i32>>>);

impl ClientContext for Revocations {}

impl ConsumerContext for Revocations {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut revoked = self.0.lock().unwrap();
            revoked.extend(tpl.elements().iter().map(|e| e.partition()));
        }
    }
}

#[test]
fn cooperative_sticky_revokes_only_the_partitions_that_move() {
    let b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    let (g, t) = ("g-coop", "clicks");
    create_topic(&bootstrap, t, PARTITIONS);
    let member = |ctx: Revocations| {
        let c: BaseConsumer<Revocations> = config(&bootstrap, g, "cooperative-sticky")
            .create_with_context(ctx)
            .unwrap();
        c.subscribe(&[t]).unwrap();
        c
    };
    let (r1, r2) = (Revocations::default(), Revocations::default());
    let c1 = member(r1.clone());
    let c2 = member(r2.clone());
    let before = poll_until(&[&c1, &c2], Duration::from_secs(30), "2 members", |a| {
        split_evenly(a, 3, 3)
    });
    r1.0.lock().unwrap().clear();
    r2.0.lock().unwrap().clear();

    let c3 = member(Revocations::default());
    let after = poll_until(
        &[&c1, &c2, &c3],
        Duration::from_secs(30),
        "3 members",
        |a| split_evenly(a, 2, 2),
    );
    for (i, revoked) in [&r1, &r2].into_iter().enumerate() {
        let revoked: BTreeSet<i32> = revoked.0.lock().unwrap().iter().copied().collect();
        let kept: BTreeSet<i32> = before[i].intersection(&after[i]).copied().collect();
        let moved: BTreeSet<i32> = before[i].difference(&after[i]).copied().collect();
        assert_eq!(kept.len(), 2, "member {i}: {before:?} -> {after:?}");
        assert_eq!(
            revoked, moved,
            "member {i} revoked {revoked:?}; {before:?} -> {after:?}"
        );
    }
}

/// The partitions of `topic` in a ConsumerProtocolAssignment (v0 to v3 share this layout:
/// version, [topic, [partition]], user data).
fn decode_assignment(bytes: &[u8], topic: &str) -> BTreeSet<i32> {
    let mut b = bytes;
    let version = b.get_i16();
    assert!((0..=3).contains(&version), "assignment version {version}");
    let mut out = BTreeSet::new();
    for _ in 0..b.get_i32() {
        let len = b.get_i16() as usize;
        let name = std::str::from_utf8(&b[..len]).unwrap().to_string();
        b.advance(len);
        assert_eq!(name, topic, "{bytes:?}");
        for _ in 0..b.get_i32() {
            assert!(out.insert(b.get_i32()), "a partition twice: {bytes:?}");
        }
    }
    // User data: null (-1) or a length and that many bytes.
    let user_data = b.get_i32();
    if user_data > 0 {
        b.advance(user_data as usize);
    }
    assert!(b.is_empty(), "trailing bytes in {bytes:?}");
    out
}

/// librdkafka's eager assignors: the group forms (2/2/2 over six partitions), DescribeGroups
/// names the chosen assignor, and each member's assignment there is what its consumer holds.
/// Round-robin gives Kafka's layout: members sorted by member id, partition p to member p % 3.
#[test]
fn each_librdkafka_assignor_forms_the_group() {
    let b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    let t = "assignors";
    create_topic(&bootstrap, t, PARTITIONS);
    let mut raw = Client::connect(&bootstrap);
    for strategy in ["range", "roundrobin"] {
        let g = format!("g-{strategy}");
        let members: Vec<BaseConsumer> = (0..3)
            .map(|i| {
                let c: BaseConsumer = config(&bootstrap, &g, strategy)
                    .set("client.id", format!("{strategy}-{i}"))
                    .create()
                    .unwrap();
                c.subscribe(&[t]).unwrap();
                c
            })
            .collect();
        let refs: Vec<&BaseConsumer> = members.iter().collect();
        poll_until(&refs, Duration::from_secs(30), strategy, |a| {
            split_evenly(a, 2, 2)
        });

        let deadline = Instant::now() + Duration::from_secs(10);
        let (described, held) = loop {
            for c in &members {
                let _ = c.poll(Duration::from_millis(10));
            }
            let d = describe(&mut raw, &[&g]).remove(0);
            let held: Vec<BTreeSet<i32>> = members.iter().map(assignment).collect();
            if d.error_code == NONE
                && d.group_state.to_string() == "Stable"
                && d.members.len() == 3
                && split_evenly(&held, 2, 2)
            {
                break (d, held);
            }
            assert!(
                Instant::now() < deadline,
                "{strategy}: not Stable with 3 members: {d:?}; held {held:?}"
            );
        };
        assert_eq!(described.protocol_type.to_string(), "consumer");
        assert_eq!(described.protocol_data.to_string(), strategy);
        let mut by_member_id: Vec<(String, BTreeSet<i32>)> = Vec::new();
        let mut seen = BTreeSet::new();
        for m in &described.members {
            let client_id = m.client_id.to_string();
            let i: usize = client_id
                .strip_prefix(&format!("{strategy}-"))
                .and_then(|i| i.parse().ok())
                .unwrap_or_else(|| panic!("{strategy}: client id {client_id}"));
            assert!(seen.insert(i), "{strategy}: {client_id} twice");
            let decoded = decode_assignment(&m.member_assignment, t);
            assert_eq!(
                decoded, held[i],
                "{strategy}: {client_id} ({})",
                m.member_id
            );
            by_member_id.push((m.member_id.to_string(), decoded));
        }
        if strategy == "roundrobin" {
            by_member_id.sort();
            for (k, (_, partitions)) in by_member_id.iter().enumerate() {
                let k = k as i32;
                assert_eq!(
                    partitions,
                    &BTreeSet::from([k, k + 3]),
                    "round-robin layout by member id: {by_member_id:?}"
                );
            }
        }
    }
}

// ---- raw protocol ------------------------------------------------------------------------

const NONE: i16 = keel_vocab::ErrorCode::NONE.code();
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;
const GROUP_MAX_SIZE_REACHED: i16 = 81;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

/// A ConsumerProtocolSubscription v0 for these topics.
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

fn join_request(group: &str, member: &str, protocol_type: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member))
        .with_protocol_type(s(protocol_type))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(s("range"))
        .with_metadata(subscription(&["events"]))])
}

fn join(c: &mut Client, req: &JoinGroupRequest) -> JoinGroupResponse {
    c.send(ApiKey::JoinGroup, 5, req)
}

/// Joins as a new member (the v4+ MEMBER_ID_REQUIRED handshake), retrying while the
/// coordinator loads; the first answer with the member id.
fn join_new(c: &mut Client, group: &str) -> JoinGroupResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = join(c, &join_request(group, "", "consumer"));
        match r.error_code {
            MEMBER_ID_REQUIRED => {
                assert!(!r.member_id.is_empty());
                return join(c, &join_request(group, &r.member_id, "consumer"));
            }
            COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            e => panic!("join: error {e}"),
        }
    }
}

fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let r: HeartbeatResponse = c.send(
        ApiKey::Heartbeat,
        3,
        &HeartbeatRequest::default()
            .with_group_id(gid(group))
            .with_member_id(s(member))
            .with_generation_id(generation),
    );
    r.error_code
}

fn sync(
    c: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    assignments: &[(&str, &[u8])],
) -> SyncGroupResponse {
    c.send(
        ApiKey::SyncGroup,
        3,
        &SyncGroupRequest::default()
            .with_group_id(gid(group))
            .with_member_id(s(member))
            .with_generation_id(generation)
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        sync_group_request::SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            ),
    )
}

fn commit(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let r: OffsetCommitResponse = c.send(
        ApiKey::OffsetCommit,
        7,
        &OffsetCommitRequest::default()
            .with_group_id(gid(group))
            .with_member_id(s(member))
            .with_generation_id_or_member_epoch(generation)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(7),
                    ]),
            ]),
    );
    r.topics[0].partitions[0].error_code
}

fn describe(c: &mut Client, groups: &[&str]) -> Vec<describe_groups_response::DescribedGroup> {
    let r: DescribeGroupsResponse = c.send(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(groups.iter().map(|g| gid(g)).collect()),
    );
    r.groups
}

fn list(c: &mut Client, states: &[&str]) -> Vec<(String, String, String)> {
    let r: ListGroupsResponse = c.send(
        ApiKey::ListGroups,
        4,
        &ListGroupsRequest::default().with_states_filter(states.iter().map(|x| s(x)).collect()),
    );
    assert_eq!(r.error_code, NONE);
    let mut out: Vec<(String, String, String)> = r
        .groups
        .into_iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn delete_groups(c: &mut Client, groups: &[&str]) -> Vec<(String, i16)> {
    let r: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(groups.iter().map(|g| gid(g)).collect()),
    );
    r.results
        .into_iter()
        .map(|x| (x.group_id.0.to_string(), x.error_code))
        .collect()
}

fn committed(c: &mut Client, group: &str) -> i64 {
    let r: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        5,
        &OffsetFetchRequest::default()
            .with_group_id(gid(group))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic("events"))
                    .with_partition_indexes(vec![0]),
            ])),
    );
    r.topics[0].partitions[0].committed_offset
}

#[test]
fn raw_member_checks_parking_and_group_admin() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_raw(&mut c);
    let g = "raw-group";
    let _: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(s(g)),
    );

    // One member: its join completes at once (generation 1, it leads), its sync too.
    let joined = join_new(&mut c, g);
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.generation_id, 1);
    let a = joined.member_id.to_string();
    assert_eq!(joined.leader.to_string(), a);
    assert_eq!(joined.members.len(), 1);
    let synced = sync(&mut c, g, &a, 1, &[(&a, b"assignment-a")]);
    assert_eq!(synced.error_code, NONE);
    assert_eq!(&synced.assignment[..], b"assignment-a");

    // Unknown member and stale generation, on every member request.
    assert_eq!(heartbeat(&mut c, g, "nobody", 1), UNKNOWN_MEMBER_ID);
    assert_eq!(heartbeat(&mut c, g, &a, 0), ILLEGAL_GENERATION);
    assert_eq!(heartbeat(&mut c, g, &a, 1), NONE);
    assert_eq!(
        sync(&mut c, g, "nobody", 1, &[]).error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(sync(&mut c, g, &a, 0, &[]).error_code, ILLEGAL_GENERATION);
    assert_eq!(commit(&mut c, g, "nobody", 1), UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&mut c, g, &a, 0), ILLEGAL_GENERATION);
    assert_eq!(commit(&mut c, g, &a, 1), NONE);
    assert_eq!(committed(&mut c, g), 7);
    // A simple commit (no generation) to a group with members names an unknown member.
    assert_eq!(commit(&mut c, g, "", -1), UNKNOWN_MEMBER_ID);
    // Heartbeat to a group that does not exist.
    assert_eq!(
        heartbeat(&mut c, "no-such-group", "x", 1),
        UNKNOWN_MEMBER_ID
    );

    // Another protocol type, or none, cannot join.
    let other = join(&mut c, &join_request(g, "", "connect"));
    assert_eq!(other.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let empty = join(
        &mut c,
        &join_request("raw-other", "", "consumer").with_protocols(vec![]),
    );
    assert_eq!(empty.error_code, INCONSISTENT_GROUP_PROTOCOL);

    // Active and subscribed: its offsets and the group itself stay.
    let r: OffsetDeleteResponse = c.send(
        ApiKey::OffsetDelete,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(gid(g))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic("events"))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ]),
            ]),
    );
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    assert_eq!(
        delete_groups(&mut c, &[g, "never-was"]),
        vec![
            (g.to_string(), NON_EMPTY_GROUP),
            ("never-was".to_string(), GROUP_ID_NOT_FOUND)
        ]
    );

    // A second member's join waits for the rebalance (on its own connection, in a thread),
    // while the first keeps being answered: it learns of the rebalance and rejoins.
    let bootstrap = b.bootstrap();
    let second = std::thread::spawn(move || {
        let mut c2 = Client::connect(&bootstrap);
        let joined = join_new(&mut c2, "raw-group");
        (c2, joined)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while heartbeat(&mut c, g, &a, 1) != REBALANCE_IN_PROGRESS {
        assert!(Instant::now() < deadline, "no rebalance");
        std::thread::sleep(Duration::from_millis(50));
    }
    let described = describe(&mut c, &[g]);
    assert_eq!(described[0].group_state.to_string(), "PreparingRebalance");
    assert_eq!(described[0].members.len(), 2);
    let rejoined = join(&mut c, &join_request(g, &a, "consumer"));
    assert_eq!(rejoined.error_code, NONE);
    assert_eq!(rejoined.generation_id, 2);
    let (mut c2, joined2) = second.join().unwrap();
    assert_eq!(joined2.error_code, NONE);
    assert_eq!(joined2.generation_id, 2);
    let b_id = joined2.member_id.to_string();
    assert_ne!(a, b_id);
    // The leader's SyncGroup hands out both assignments.
    let leader = rejoined.leader.to_string();
    let (lc, fc, follower) = if leader == a {
        (&mut c, &mut c2, b_id.clone())
    } else {
        (&mut c2, &mut c, a.clone())
    };
    let assignments: [(&str, &[u8]); 2] = [(&leader, b"for-leader"), (&follower, b"for-follower")];
    assert_eq!(sync(lc, g, &leader, 2, &assignments).error_code, NONE);
    let follower_sync = sync(fc, g, &follower, 2, &[]);
    assert_eq!(follower_sync.error_code, NONE);
    assert_eq!(&follower_sync.assignment[..], b"for-follower");

    let described = describe(&mut c, &[g, "never-was"]);
    assert_eq!(described[0].error_code, NONE);
    assert_eq!(described[0].group_state.to_string(), "Stable");
    assert_eq!(described[0].protocol_type.to_string(), "consumer");
    assert_eq!(described[0].protocol_data.to_string(), "range");
    assert_eq!(described[0].members.len(), 2);
    assert!(described[0].members.iter().all(
        |m| m.client_host.to_string() == "/127.0.0.1" && m.client_id.to_string() == "keel-test"
    ));
    assert_eq!(described[1].group_state.to_string(), "Dead");
    assert!(list(&mut c, &[]).contains(&(g.into(), "consumer".into(), "Stable".into())));
    assert!(!list(&mut c, &["Empty"]).iter().any(|x| x.0 == g));

    // Both leave in one batch (v3+), with a stranger: one error each.
    let r: LeaveGroupResponse = c.send(
        ApiKey::LeaveGroup,
        3,
        &LeaveGroupRequest::default()
            .with_group_id(gid(g))
            .with_members(
                [a.as_str(), "stranger", b_id.as_str()]
                    .iter()
                    .map(|m| leave_group_request::MemberIdentity::default().with_member_id(s(m)))
                    .collect(),
            ),
    );
    assert_eq!(r.error_code, NONE);
    let errors: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(errors, vec![NONE, UNKNOWN_MEMBER_ID, NONE]);
    assert_eq!(describe(&mut c, &[g])[0].group_state.to_string(), "Empty");
    assert!(list(&mut c, &["empty"]).contains(&(g.into(), "consumer".into(), "Empty".into())));

    // Empty now: deleted with its offsets.
    assert_eq!(delete_groups(&mut c, &[g]), vec![(g.to_string(), NONE)]);
    assert_eq!(committed(&mut c, g), -1);
    assert_eq!(describe(&mut c, &[g])[0].group_state.to_string(), "Dead");
    assert!(!list(&mut c, &[]).iter().any(|x| x.0 == g));
    assert_eq!(
        delete_groups(&mut c, &[g]),
        vec![(g.to_string(), GROUP_ID_NOT_FOUND)]
    );
}

fn create_topic_raw(c: &mut Client) {
    common::client::create_topic(c, "events", 2);
}

#[test]
fn oldest_and_newest_versions_and_the_group_limits() {
    let b = Broker::start(&[
        "--set",
        "group.max.size=1",
        "--set",
        "group.min.session.timeout.ms=5000",
    ]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_raw(&mut c);
    let _: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(s("old")),
    );

    // v0 everywhere: a member id at once (no MEMBER_ID_REQUIRED before v4), one leave error.
    let deadline = Instant::now() + Duration::from_secs(20);
    let joined: JoinGroupResponse = loop {
        let r: JoinGroupResponse =
            c.send(ApiKey::JoinGroup, 0, &join_request("old", "", "consumer"));
        match r.error_code {
            COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100))
            }
            _ => break r,
        }
    };
    assert_eq!((joined.error_code, joined.generation_id), (NONE, 1));
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    let m = joined.member_id.to_string();
    let synced: SyncGroupResponse = c.send(
        ApiKey::SyncGroup,
        0,
        &SyncGroupRequest::default()
            .with_group_id(gid("old"))
            .with_member_id(s(&m))
            .with_generation_id(1)
            .with_assignments(vec![
                sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(s(&m))
                    .with_assignment(Bytes::from_static(b"a")),
            ]),
    );
    assert_eq!(
        (synced.error_code, &synced.assignment[..]),
        (NONE, &b"a"[..])
    );
    let hb: HeartbeatResponse = c.send(
        ApiKey::Heartbeat,
        0,
        &HeartbeatRequest::default()
            .with_group_id(gid("old"))
            .with_member_id(s(&m))
            .with_generation_id(1),
    );
    assert_eq!(hb.error_code, NONE);
    let described: DescribeGroupsResponse = c.send(
        ApiKey::DescribeGroups,
        0,
        &DescribeGroupsRequest::default().with_groups(vec![gid("old")]),
    );
    assert_eq!(described.groups[0].group_state.to_string(), "Stable");
    let listed: ListGroupsResponse = c.send(ApiKey::ListGroups, 0, &ListGroupsRequest::default());
    assert!(listed
        .groups
        .iter()
        .any(|g| g.group_id.0.to_string() == "old"));

    // group.max.size=1: a second member is refused.
    let second = join(&mut c, &join_request("old", "", "consumer"));
    assert_eq!(second.error_code, GROUP_MAX_SIZE_REACHED);
    let left: LeaveGroupResponse = c.send(
        ApiKey::LeaveGroup,
        0,
        &LeaveGroupRequest::default()
            .with_group_id(gid("old"))
            .with_member_id(s(&m)),
    );
    assert_eq!(left.error_code, NONE);
    let left_again: LeaveGroupResponse = c.send(
        ApiKey::LeaveGroup,
        1,
        &LeaveGroupRequest::default()
            .with_group_id(gid("old"))
            .with_member_id(s(&m)),
    );
    assert_eq!(left_again.error_code, UNKNOWN_MEMBER_ID);

    // Newest versions: JoinGroup v9 (protocol type in the answer), SyncGroup v5 (checked and
    // echoed), Heartbeat v4, LeaveGroup v5, ListGroups v5, DeleteGroups v2.
    let first: JoinGroupResponse =
        c.send(ApiKey::JoinGroup, 9, &join_request("new", "", "consumer"));
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let m = first.member_id.to_string();
    let joined: JoinGroupResponse =
        c.send(ApiKey::JoinGroup, 9, &join_request("new", &m, "consumer"));
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
    assert!(!joined.skip_assignment);
    let sync_v5 = |protocol: &str| {
        SyncGroupRequest::default()
            .with_group_id(gid("new"))
            .with_member_id(s(&m))
            .with_generation_id(1)
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s(protocol)))
    };
    let wrong: SyncGroupResponse = c.send(ApiKey::SyncGroup, 5, &sync_v5("roundrobin"));
    assert_eq!(wrong.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let synced: SyncGroupResponse = c.send(ApiKey::SyncGroup, 5, &sync_v5("range"));
    assert_eq!(synced.error_code, NONE);
    assert_eq!(synced.protocol_name.as_deref(), Some("range"));
    let hb: HeartbeatResponse = c.send(
        ApiKey::Heartbeat,
        4,
        &HeartbeatRequest::default()
            .with_group_id(gid("new"))
            .with_member_id(s(&m))
            .with_generation_id(1),
    );
    assert_eq!(hb.error_code, NONE);
    let listed: ListGroupsResponse = c.send(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default()
            .with_types_filter(vec![s("Classic")])
            .with_states_filter(vec![s("stable")]),
    );
    let names: Vec<(String, String)> = listed
        .groups
        .iter()
        .map(|g| (g.group_id.0.to_string(), g.group_type.to_string()))
        .collect();
    assert_eq!(names, vec![("new".to_string(), "classic".to_string())]);
    let none: ListGroupsResponse = c.send(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("share")]),
    );
    assert!(none.groups.is_empty());
    let left: LeaveGroupResponse = c.send(
        ApiKey::LeaveGroup,
        5,
        &LeaveGroupRequest::default()
            .with_group_id(gid("new"))
            .with_members(vec![leave_group_request::MemberIdentity::default()
                .with_member_id(s(&m))
                .with_reason(Some(s("test over")))]),
    );
    assert_eq!(left.members[0].error_code, NONE);
    assert_eq!(
        delete_groups(&mut c, &["new", "old"]),
        vec![("new".to_string(), NONE), ("old".to_string(), NONE)]
    );

    // A session timeout outside the broker's bounds.
    let short = join(
        &mut c,
        &join_request("short", "", "consumer").with_session_timeout_ms(4_999),
    );
    assert_eq!(short.error_code, INVALID_SESSION_TIMEOUT);
}

#[test]
fn an_empty_group_without_offsets_is_forgotten_at_the_expiry_check() {
    let b = Broker::start(&["--set", "offsets.retention.check.interval.ms=300"]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_raw(&mut c);
    let _: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(s("idle")),
    );
    let joined = join_new(&mut c, "idle");
    assert_eq!(joined.error_code, NONE);
    let r: LeaveGroupResponse = c.send(
        ApiKey::LeaveGroup,
        3,
        &LeaveGroupRequest::default()
            .with_group_id(gid("idle"))
            .with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(joined.member_id)
            ]),
    );
    assert_eq!(r.members[0].error_code, NONE);
    // Listed as Empty for a while (Kafka keeps it until its cleanup), then gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while list(&mut c, &[]).iter().any(|g| g.0 == "idle") {
        assert!(
            Instant::now() < deadline,
            "the empty group is never forgotten"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        describe(&mut c, &["idle"])[0].group_state.to_string(),
        "Dead"
    );
}

/// Membership is persisted (Kafka's `GroupMetadata` record, written when a generation
/// completes): after the coordinator is killed and restarts, the group is back `Stable` with the
/// same members, their heartbeats and commits at that generation are accepted, and nobody
/// rebalances.
#[test]
fn membership_survives_a_coordinator_restart() {
    let mut b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    let (g, t) = ("g-restart", "restarts");
    create_topic(&bootstrap, t, PARTITIONS);
    let c1 = consumer(&bootstrap, g, "range", t);
    let c2 = consumer(&bootstrap, g, "range", t);
    let before = poll_until(&[&c1, &c2], Duration::from_secs(30), "2 members", |a| {
        split_evenly(a, 3, 3)
    });
    let mut raw = Client::connect(&bootstrap);
    let members = |c: &mut Client| -> Option<(String, BTreeSet<String>)> {
        let d = describe(c, &[g]);
        (d[0].error_code == NONE).then(|| {
            (
                d[0].group_state.to_string(),
                d[0].members
                    .iter()
                    .map(|m| m.member_id.to_string())
                    .collect(),
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let formed = loop {
        let _ = c1.poll(Duration::from_millis(10));
        let _ = c2.poll(Duration::from_millis(10));
        match members(&mut raw) {
            Some((state, ids)) if state == "Stable" && ids.len() == 2 => break ids,
            _ => assert!(Instant::now() < deadline, "the group did not form"),
        }
    };
    // The record is committed with the next group commit (milliseconds).
    std::thread::sleep(Duration::from_millis(500));
    b.kill9_and_restart();

    // Restored from the log, before any member had to rejoin.
    let mut raw = Client::connect(&b.bootstrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let restored = loop {
        if let Some(answer) = members(&mut raw) {
            break answer;
        }
        assert!(Instant::now() < deadline, "the coordinator did not load");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(restored, ("Stable".to_string(), formed.clone()));

    // The members go on at their generation: same assignments, same member ids, and a commit
    // with the generation passes.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let _ = c1.poll(Duration::from_millis(20));
        let _ = c2.poll(Duration::from_millis(20));
    }
    assert_eq!(vec![assignment(&c1), assignment(&c2)], before);
    assert_eq!(members(&mut raw), Some(("Stable".to_string(), formed)));
    let mut offsets = TopicPartitionList::new();
    let first = *before[0].iter().next().unwrap();
    offsets
        .add_partition_offset(t, first, Offset::Offset(0))
        .unwrap();
    c1.commit(&offsets, CommitMode::Sync)
        .expect("a commit at the restored generation");
}
