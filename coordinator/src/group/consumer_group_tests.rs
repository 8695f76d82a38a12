use super::*;
use crate::testing::{set, topic_id, tp, view, PartitionSet, Rng};

const REBALANCE_MS: i32 = 30_000;
const SESSION_MS: i64 = 45_000;
const HEARTBEAT_MS: i64 = 5_000;

/// A consumer as the coordinator sees it: it applies every assignment at once (revoking
/// what left it), and sends its subscription only when joining or after an error.
#[derive(Clone, Debug)]
struct Client {
    member_id: String,
    instance_id: Option<String>,
    epoch: i32,
    owned: PartitionSet,
    topics: Vec<String>,
    regex: Option<String>,
    assignor: Option<String>,
    send_full: bool,
}

impl Client {
    fn new(member_id: &str, topics: &[&str]) -> Client {
        Client {
            member_id: member_id.to_owned(),
            instance_id: None,
            epoch: 0,
            owned: PartitionSet::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            regex: None,
            assignor: None,
            send_full: false,
        }
    }

    fn with_instance(mut self, instance: &str) -> Client {
        self.instance_id = Some(instance.to_owned());
        self
    }

    fn request(&self) -> HeartbeatRequest {
        let full = self.epoch == 0 || self.send_full;
        HeartbeatRequest {
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            instance_id: self.instance_id.clone(),
            rack_id: None,
            rebalance_timeout_ms: if full { REBALANCE_MS } else { -1 },
            subscribed_topic_names: full.then(|| self.topics.clone()),
            subscribed_topic_regex: if full { self.regex.clone() } else { None },
            server_assignor: if full { self.assignor.clone() } else { None },
            owned_partitions: Some(topic_partitions(&self.owned)),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    fn leave_request(&self, epoch: i32) -> HeartbeatRequest {
        HeartbeatRequest {
            member_id: self.member_id.clone(),
            member_epoch: epoch,
            instance_id: self.instance_id.clone(),
            rebalance_timeout_ms: -1,
            ..HeartbeatRequest::default()
        }
    }

    fn learn(&mut self, r: &HeartbeatResponse) {
        if r.error_code != ErrorCode::NONE {
            return;
        }
        self.member_id = r.member_id.clone().expect("member id");
        self.epoch = r.member_epoch;
        self.send_full = false;
        if let Some(assignment) = &r.assignment {
            self.owned = partition_set(assignment);
        }
    }
}

struct Harness {
    group: ConsumerGroup,
    topics: TopicsView,
    now_ms: i64,
}

impl Harness {
    fn new(topics: &[(&str, i32)]) -> Harness {
        Harness::with_config(topics, ConsumerGroupConfig::default())
    }

    fn with_config(topics: &[(&str, i32)], config: ConsumerGroupConfig) -> Harness {
        Harness {
            group: ConsumerGroup::new("g", config),
            topics: view(topics),
            now_ms: 1_000,
        }
    }

    fn send(&mut self, request: HeartbeatRequest) -> HeartbeatResponse {
        let r = self.group.heartbeat(request, &self.topics, self.now_ms);
        assert_eq!(self.group.check_invariants(), Ok(()));
        r
    }

    fn heartbeat(&mut self, client: &mut Client) -> HeartbeatResponse {
        let r = self.send(client.request());
        client.learn(&r);
        r
    }

    /// Heartbeats every client in turn until the group is stable, checking after each
    /// heartbeat that no partition has two owners; returns every client's owned set after
    /// every heartbeat.
    fn settle(&mut self, clients: &mut [Client]) -> Vec<Vec<PartitionSet>> {
        let mut history = Vec::new();
        for _ in 0..20 {
            for i in 0..clients.len() {
                let r = self.heartbeat(&mut clients[i]);
                assert_eq!(r.error_code, ErrorCode::NONE, "{r:?}");
                assert_disjoint(clients);
                history.push(clients.iter().map(|c| c.owned.clone()).collect());
            }
            if self.group.state() == ConsumerGroupState::Stable {
                for c in clients.iter() {
                    assert_eq!(c.owned, self.group.members[&c.member_id].assigned);
                    assert_eq!(c.epoch, self.group.assignment_epoch());
                }
                return history;
            }
            self.now_ms += 100;
        }
        panic!("not stable: {:#?}", self.group.describe());
    }
}

fn assert_disjoint(clients: &[Client]) {
    let mut seen = PartitionSet::new();
    for c in clients {
        for p in &c.owned {
            assert!(seen.insert(*p), "{p:?} owned twice: {clients:#?}");
        }
    }
}

fn three_stable_members(h: &mut Harness) -> Vec<Client> {
    let mut clients = Vec::new();
    for name in ["a", "b", "c"] {
        clients.push(Client::new(name, &["t"]));
        h.settle(&mut clients);
    }
    clients
}

#[test]
fn three_members_join_one_by_one_and_get_two_partitions_each() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut a = Client::new("a", &["t"]);
    let r = h.heartbeat(&mut a);
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, 1));
    assert_eq!(r.heartbeat_interval_ms, 5_000);
    assert_eq!(a.owned, set("t", &[0, 1, 2, 3, 4, 5]));
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);

    // b joins: it waits at the new epoch for what a still holds; a revokes first.
    let mut b = Client::new("b", &["t"]);
    let r = h.heartbeat(&mut b);
    assert_eq!((r.member_epoch, r.assignment.clone()), (2, Some(vec![])));
    assert_eq!(h.group.state(), ConsumerGroupState::Reconciling);
    let r = h.heartbeat(&mut a);
    assert_eq!(r.member_epoch, 1, "the epoch stays until a revokes");
    assert_eq!(a.owned, set("t", &[0, 1, 2]));
    let r = h.heartbeat(&mut b);
    assert_eq!(r.assignment, None, "a has not acknowledged yet");
    let r = h.heartbeat(&mut a);
    assert_eq!((r.member_epoch, r.assignment), (2, None));
    let r = h.heartbeat(&mut b);
    assert_eq!(b.owned, set("t", &[3, 4, 5]));
    assert_eq!(r.member_epoch, 2);
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);

    let mut clients = vec![a, b, Client::new("c", &["t"])];
    h.settle(&mut clients);
    let mut all = PartitionSet::new();
    for c in &clients {
        assert_eq!(c.owned.len(), 2, "{clients:?}");
        assert_eq!(c.epoch, 3);
        all.extend(c.owned.iter().copied());
    }
    assert_eq!(all, set("t", &[0, 1, 2, 3, 4, 5]));
    assert_eq!(h.group.group_epoch(), 3);

    // Heartbeats of a stable group change nothing.
    for c in &mut clients {
        let r = h.heartbeat(c);
        assert_eq!((r.member_epoch, r.assignment), (3, None));
    }
    assert_eq!(h.group.group_epoch(), 3);
}

#[test]
fn a_fourth_member_gets_only_moved_partitions() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = three_stable_members(&mut h);
    let before: Vec<PartitionSet> = clients.iter().map(|c| c.owned.clone()).collect();
    clients.push(Client::new("d", &["t"]));
    let history = h.settle(&mut clients);
    let moved: usize = (0..3)
        .map(|i| before[i].difference(&clients[i].owned).count())
        .sum();
    assert_eq!(moved, 1, "{clients:?}");
    assert_eq!(clients[3].owned.len(), 1);
    for (i, c) in clients.iter().take(3).enumerate() {
        assert!(c.owned.is_subset(&before[i]), "{} only loses", c.member_id);
        // What stays was never revoked on the way.
        for snapshot in &history {
            assert!(
                c.owned.is_subset(&snapshot[i]),
                "{} revoked a staying partition",
                c.member_id
            );
        }
    }
}

#[test]
fn a_leaving_member_gives_its_partitions_to_the_others() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = three_stable_members(&mut h);
    let epoch = h.group.group_epoch();
    let c = clients.pop().expect("three clients");
    let r = h.send(c.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
    assert_eq!(
        (r.error_code, r.member_epoch),
        (ErrorCode::NONE, LEAVE_GROUP_MEMBER_EPOCH)
    );
    assert_eq!(h.group.group_epoch(), epoch + 1);
    assert_eq!(h.group.state(), ConsumerGroupState::Assigning);
    let before: Vec<PartitionSet> = clients.iter().map(|c| c.owned.clone()).collect();
    h.settle(&mut clients);
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(c.owned.len(), 3);
        assert!(
            before[i].is_subset(&c.owned),
            "{} kept its partitions",
            c.member_id
        );
    }
    let r = h.heartbeat(&mut c.clone());
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
    let r = h.send(c.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn session_timeout_removes_a_silent_member() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = three_stable_members(&mut h);
    let silent = clients.pop().expect("three clients");
    let deadline_ms = h.group.members[&silent.member_id].session_deadline_ms;
    assert_eq!(h.group.next_deadline_ms(), Some(deadline_ms));
    assert_eq!(
        deadline_ms,
        h.now_ms + SESSION_MS,
        "its last heartbeat was now"
    );
    while h.now_ms + HEARTBEAT_MS < deadline_ms {
        h.now_ms += HEARTBEAT_MS;
        for c in &mut clients {
            assert_eq!(h.heartbeat(c).error_code, ErrorCode::NONE);
        }
    }
    assert_eq!(h.group.member_count(), 3);
    assert!(h.group.tick(deadline_ms - 1).is_empty());
    let expired = h.group.tick(deadline_ms);
    assert_eq!(
        expired,
        vec![Expired {
            member_id: silent.member_id.clone(),
            reason: ExpiryReason::SessionTimeout,
        }]
    );
    assert_eq!(h.group.state(), ConsumerGroupState::Assigning);
    h.now_ms = deadline_ms;
    h.settle(&mut clients);
    assert!(clients.iter().all(|c| c.owned.len() == 3));
    assert_eq!(
        h.heartbeat(&mut silent.clone()).error_code,
        UNKNOWN_MEMBER_ID
    );
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_fenced() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut a = Client::new("a", &["t"]);
    h.heartbeat(&mut a);
    let mut b = Client::new("b", &["t"]);
    h.heartbeat(&mut b);
    // a hears it must give up three partitions, and keeps saying it holds all six.
    let stubborn = a.request();
    let r = h.send(stubborn.clone());
    assert_eq!(r.member_epoch, 1);
    assert_eq!(
        r.assignment.map(|a| partition_set(&a)),
        Some(set("t", &[0, 1, 2]))
    );
    let deadline_ms = h.group.members["a"]
        .revocation_deadline_ms
        .expect("revoking");
    assert_eq!(deadline_ms, h.now_ms + i64::from(REBALANCE_MS));
    while h.now_ms + HEARTBEAT_MS < deadline_ms {
        h.now_ms += HEARTBEAT_MS;
        assert_eq!(h.send(stubborn.clone()).error_code, ErrorCode::NONE);
        assert_eq!(h.heartbeat(&mut b).error_code, ErrorCode::NONE);
        assert!(b.owned.is_empty(), "b waits for a");
    }
    assert_eq!(h.group.next_deadline_ms(), Some(deadline_ms));
    let expired = h.group.tick(deadline_ms);
    assert_eq!(expired[0].reason, ExpiryReason::RebalanceTimeout);
    h.now_ms = deadline_ms;
    assert_eq!(h.send(stubborn).error_code, UNKNOWN_MEMBER_ID);
    h.heartbeat(&mut b);
    assert_eq!(b.owned, set("t", &[0, 1, 2, 3, 4, 5]));
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);
}

#[test]
fn a_static_member_leaves_for_a_while_and_rejoins_with_its_assignment() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = vec![
        Client::new("a", &["t"]).with_instance("ia"),
        Client::new("b", &["t"]).with_instance("ib"),
    ];
    h.settle(&mut clients);
    let epoch = h.group.group_epoch();
    let a_owned = clients[0].owned.clone();

    let r = h.send(clients[0].leave_request(LEAVE_GROUP_STATIC_MEMBER_EPOCH));
    assert_eq!(
        (r.error_code, r.member_epoch),
        (ErrorCode::NONE, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
    );
    assert_eq!(
        h.group.group_epoch(),
        epoch,
        "a temporary leave is no rebalance"
    );
    let b = &mut clients[1];
    assert_eq!(h.heartbeat(b).assignment, None);
    assert_eq!(b.owned.len(), 3);

    // Another process cannot take b's instance id while b is there.
    let impostor = Client::new("x", &["t"]).with_instance("ib");
    assert_eq!(
        h.send(impostor.request()).error_code,
        UNRELEASED_INSTANCE_ID
    );
    // Nor heartbeat as b's instance with another member id.
    let mut wrong = clients[1].request();
    wrong.member_id = "a".into();
    assert_eq!(h.send(wrong).error_code, FENCED_INSTANCE_ID);

    // a's next incarnation has a new member id and the same instance id.
    let mut a2 = Client::new("a2", &["t"]).with_instance("ia");
    let r = h.heartbeat(&mut a2);
    assert_eq!(r.error_code, ErrorCode::NONE, "{r:?}");
    assert_eq!(a2.owned, a_owned);
    assert_eq!(r.member_epoch, epoch);
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);
    // The old incarnation is fenced by its instance id.
    assert_eq!(h.heartbeat(&mut clients[0]).error_code, FENCED_INSTANCE_ID);

    // A static member that leaves for good (-1) frees its instance id and partitions.
    let r = h.send(a2.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
    assert_eq!(r.error_code, ErrorCode::NONE);
    let mut rest = vec![clients[1].clone()];
    h.settle(&mut rest);
    assert_eq!(rest[0].owned.len(), 6);
    let r = h.heartbeat(&mut Client::new("a3", &["t"]).with_instance("ia"));
    assert_eq!(r.error_code, ErrorCode::NONE);
}

#[test]
fn a_static_member_that_stays_away_times_out() {
    let mut h = Harness::new(&[("t", 4)]);
    let mut clients = vec![
        Client::new("a", &["t"]).with_instance("ia"),
        Client::new("b", &["t"]),
    ];
    h.settle(&mut clients);
    h.send(clients[0].leave_request(LEAVE_GROUP_STATIC_MEMBER_EPOCH));
    let deadline_ms = h.group.members["a"].session_deadline_ms;
    let mut b = vec![clients[1].clone()];
    h.now_ms = deadline_ms - 1;
    h.heartbeat(&mut b[0]);
    let expired = h.group.tick(deadline_ms);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].member_id, "a");
    h.settle(&mut b);
    assert_eq!(b[0].owned.len(), 4);
}

#[test]
fn epochs_and_identities_are_checked() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = three_stable_members(&mut h);
    let epoch = clients[0].epoch;
    let snapshot = h.group.describe();

    let mut ahead = clients[0].request();
    ahead.member_epoch = epoch + 1;
    assert_eq!(h.send(ahead).error_code, FENCED_MEMBER_EPOCH);
    let mut old = clients[0].request();
    old.member_epoch = 1;
    assert_eq!(h.send(old).error_code, FENCED_MEMBER_EPOCH);
    let mut ghost = clients[0].request();
    ghost.member_id = "ghost".into();
    let r = h.send(ghost);
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
    assert!(r.error_message.is_some() && r.member_id.is_none());
    assert_eq!(
        h.group.describe(),
        snapshot,
        "refused heartbeats change nothing"
    );

    // A heartbeat retried with the previous epoch (its answer was lost) is accepted.
    let mut a = clients[0].clone();
    let previous = h.group.members[&a.member_id].previous_member_epoch;
    assert!(previous > 0 && previous < epoch);
    a.epoch = previous;
    let r = h.heartbeat(&mut a);
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
    // ...unless it claims partitions it no longer has.
    let mut greedy = a.request();
    greedy.member_epoch = previous;
    greedy.owned_partitions = Some(vec![(topic_id("t", 0), (0..6).collect())]);
    assert_eq!(h.send(greedy).error_code, FENCED_MEMBER_EPOCH);

    // After FENCED_MEMBER_EPOCH a member rejoins with epoch 0 and its id.
    let c = &mut clients[2];
    let held = c.owned.clone();
    c.epoch = 0;
    c.owned.clear();
    let r = h.heartbeat(c);
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
    assert_eq!(c.owned, held);
    assert_eq!(h.group.group_epoch(), epoch);
}

#[test]
fn bad_heartbeats_are_refused() {
    let mut h = Harness::with_config(
        &[("t", 6)],
        ConsumerGroupConfig {
            group_size_max: 2,
            ..ConsumerGroupConfig::default()
        },
    );
    let join = Client::new("a", &["t"]).request();
    let cases: Vec<(HeartbeatRequest, ErrorCode)> = vec![
        (
            HeartbeatRequest {
                subscribed_topic_names: None,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                rebalance_timeout_ms: -1,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                owned_partitions: Some(vec![(topic_id("t", 0), vec![0])]),
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                owned_partitions: None,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                member_id: String::new(),
                member_epoch: 3,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                member_epoch: LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                member_epoch: -3,
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                instance_id: Some(String::new()),
                ..join.clone()
            },
            INVALID_REQUEST,
        ),
        (
            HeartbeatRequest {
                server_assignor: Some("sticky".into()),
                ..join.clone()
            },
            UNSUPPORTED_ASSIGNOR,
        ),
        (
            HeartbeatRequest {
                subscribed_topic_regex: Some("(orders".into()),
                ..join.clone()
            },
            INVALID_REGULAR_EXPRESSION,
        ),
        (
            HeartbeatRequest {
                member_epoch: 4,
                ..join.clone()
            },
            UNKNOWN_MEMBER_ID,
        ),
    ];
    for (request, code) in cases {
        let r = h.send(request.clone());
        assert_eq!(r.error_code, code, "{request:?}");
        assert!(h.group.is_empty());
        assert_eq!(h.group.group_epoch(), 0);
    }

    // A version-0 client lets the coordinator choose its member id.
    let mut anonymous = Client::new("", &["t"]);
    let r = h.heartbeat(&mut anonymous);
    assert_eq!(r.error_code, ErrorCode::NONE);
    assert!(!anonymous.member_id.is_empty());
    assert_eq!(
        h.heartbeat(&mut Client::new("b", &["t"])).error_code,
        ErrorCode::NONE
    );
    let r = h.heartbeat(&mut Client::new("c", &["t"]));
    assert_eq!(r.error_code, GROUP_MAX_SIZE_REACHED);
    assert_eq!(h.group.member_count(), 2);
    // A member already in the group may rejoin when it is full.
    anonymous.epoch = 0;
    anonymous.owned.clear();
    assert_eq!(h.heartbeat(&mut anonymous).error_code, ErrorCode::NONE);
}

#[test]
fn can_commit_checks_member_and_epoch() {
    let mut h = Harness::new(&[("t", 2)]);
    assert_eq!(
        h.group.can_commit("", -1),
        ErrorCode::NONE,
        "an empty group takes admin commits"
    );
    let mut a = Client::new("a", &["t"]);
    h.heartbeat(&mut a);
    assert_eq!(h.group.can_commit("a", a.epoch), ErrorCode::NONE);
    assert_eq!(h.group.can_commit("", -1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.group.can_commit("z", a.epoch), UNKNOWN_MEMBER_ID);
    let mut b = Client::new("b", &["t"]);
    h.heartbeat(&mut b);
    h.heartbeat(&mut a);
    h.heartbeat(&mut a);
    assert_eq!(a.epoch, 2);
    assert_eq!(h.group.can_commit("a", 1), STALE_MEMBER_EPOCH);
    assert_eq!(h.group.can_commit("a", 2), ErrorCode::NONE);
}

#[test]
fn a_regex_subscription_picks_up_new_matching_topics() {
    let mut h = Harness::new(&[("orders-eu", 2), ("payments", 3)]);
    let mut a = Client::new("a", &[]);
    a.regex = Some("orders-.*".into());
    h.heartbeat(&mut a);
    assert_eq!(a.owned, set("orders-eu", &[0, 1]));
    assert_eq!(h.group.group_epoch(), 1);

    h.topics
        .insert("orders-us".into(), (topic_id("orders-us", 0), 2));
    let r = h.heartbeat(&mut a);
    assert_eq!(h.group.group_epoch(), 2, "a matching topic appeared");
    assert_eq!(r.member_epoch, 2);
    let mut expected = set("orders-eu", &[0, 1]);
    expected.extend(set("orders-us", &[0, 1]));
    assert_eq!(a.owned, expected);

    h.topics.insert("audit".into(), (topic_id("audit", 0), 1));
    h.topics
        .insert("payments".into(), (topic_id("payments", 0), 6));
    assert_eq!(h.heartbeat(&mut a).assignment, None);
    assert_eq!(h.group.group_epoch(), 2, "no subscribed topic changed");

    h.topics
        .insert("orders-us".into(), (topic_id("orders-us", 0), 3));
    h.heartbeat(&mut a);
    assert_eq!(h.group.group_epoch(), 3, "a subscribed topic grew");
    assert!(a.owned.contains(&tp("orders-us", 2)));

    // Deleted and created again: a new id, so the old partitions are revoked.
    h.topics
        .insert("orders-eu".into(), (topic_id("orders-eu", 1), 1));
    h.heartbeat(&mut a);
    assert_eq!(h.group.group_epoch(), 4);
    h.heartbeat(&mut a);
    let new_id = TopicIdPartition {
        topic_id: topic_id("orders-eu", 1),
        partition: 0,
    };
    assert!(a.owned.contains(&new_id) && !a.owned.contains(&tp("orders-eu", 0)));
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);

    let description = h.group.describe();
    assert_eq!(
        description.members[0].subscribed_topic_regex.as_deref(),
        Some("orders-.*")
    );
    let names: Vec<&str> = description.members[0]
        .assignment
        .iter()
        .map(|t| t.topic_name.as_str())
        .collect();
    assert_eq!(names, ["orders-eu", "orders-us"]);
}

#[test]
fn the_assignor_most_members_ask_for_assigns() {
    let mut h = Harness::new(&[("t", 5)]);
    let mut clients: Vec<Client> = ["a", "b"]
        .iter()
        .map(|id| {
            let mut c = Client::new(id, &["t"]);
            c.assignor = Some("range".into());
            c
        })
        .collect();
    h.settle(&mut clients);
    assert_eq!(h.group.describe().assignor_name, "range");
    assert_eq!(clients[0].owned, set("t", &[0, 1, 2]));
    assert_eq!(clients[1].owned, set("t", &[3, 4]));
}

#[test]
fn topic_regex_matches_whole_names() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("orders", &["orders"], &["orders2", "xorders", ""]),
        (".*", &["", "a", "any-topic"], &[]),
        (
            "orders-.*",
            &["orders-", "orders-eu"],
            &["orders", "my-orders-eu"],
        ),
        ("a|b", &["a", "b"], &["ab", "", "c"]),
        (
            "(orders|payments)\\..+",
            &["orders.eu", "payments.x"],
            &["orders.", "audit.x"],
        ),
        ("^t[0-9]+$", &["t0", "t123"], &["t", "tx", "t1x"]),
        (
            "[^.]*_v\\d{1,2}",
            &["a_v1", "b_c_v42"],
            &["a.b_v1", "a_v123", "a_v"],
        ),
        ("x{3}", &["xxx"], &["xx", "xxxx"]),
        ("x{2,}y?", &["xx", "xxxxy"], &["x", "xy"]),
        ("a{", &["a{"], &["a"]),
        ("[]a]+", &["]a]"], &["b"]),
        ("[a-c-]+", &["a-c", "-"], &["d"]),
        ("\\w+-\\W", &["ab_1-.", "x-?"], &["ab-c"]),
        ("(?:ab)*c", &["c", "ababc"], &["abc_"]),
        ("(a*)*b", &["b", "aaab"], &["aaaa"]),
        ("a*?b+?", &["aab", "b"], &["a"]),
        // librdkafka sends subscriptions wrapped: `(^a-.*)`, `(^a-.*)|(^b.*)`.
        ("(^rx-.*)", &["rx-", "rx-1"], &["xrx-1", "rx"]),
        (
            "(^rx-a.*)|(^rx-b.*)",
            &["rx-a1", "rx-b"],
            &["rx-c", "x-rx-a"],
        ),
        ("(rx-.*$)", &["rx-1"], &["rx"]),
        // Anchors anywhere are assertions: `a^b` and `a$b` match nothing.
        ("a^b", &[], &["ab", "a^b"]),
        ("a$b", &[], &["ab"]),
        ("(a$)?b?", &["a", "b", ""], &["ab"]),
        // RE2's flags, as RE2J takes them.
        ("(?i)orders", &["ORDERS", "Orders"], &["orders1"]),
        ("x{,3}", &["x{,3}"], &["xxx"]),
    ];
    for (pattern, matching, other) in cases {
        let regex = TopicRegex::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        for name in *matching {
            assert!(regex.is_match(name), "{pattern} should match {name:?}");
        }
        for name in *other {
            assert!(!regex.is_match(name), "{pattern} should not match {name:?}");
        }
    }
    for bad in [
        "(", ")", "a)", "[a", "*a", "a**", "a{3,2}", "a{1001}", "^*", "\\q", "[z-a]", "x|+", "\\",
    ] {
        assert!(TopicRegex::new(bad).is_err(), "{bad} should be refused");
    }
    assert!(
        TopicRegex::new(&"a".repeat(super::super::topic_regex::PATTERN_BYTES_MAX + 1)).is_err()
    );
    assert!(
        TopicRegex::new("(((a{100}){100}){100})").is_err(),
        "too large"
    );
    // No backtracking blow-up.
    let regex = TopicRegex::new("(a|aa)*(a|aa)*(a|aa)*c").expect("valid");
    assert!(!regex.is_match(&"a".repeat(249)));
    // A regex never matches internal topics.
    let mut h = Harness::new(&[("__consumer_offsets", 50), ("t", 1)]);
    let mut a = Client::new("a", &[]);
    a.regex = Some(".*".into());
    h.heartbeat(&mut a);
    assert_eq!(a.owned, set("t", &[0]));
}

/// The group as a coordinator that took over at `now_ms` rebuilds it: every record routed
/// by its key, decoded and encoded again, then loaded. Checks that nothing recorded was
/// lost and that the records do not depend on their order.
fn restored(group: &ConsumerGroup, now_ms: i64) -> ConsumerGroup {
    let records = group.to_records();
    let mut keys = BTreeSet::new();
    for (k, v) in &records {
        assert_eq!(
            consumer_group_records::record_group(k).as_deref(),
            Some(group.group_id())
        );
        let (key, value) = consumer_group_records::decode_record(k, v).expect("decodes");
        assert!(keys.insert(key.clone()), "{key:?} twice");
        let again = consumer_group_records::encode_record(&key, &value);
        assert_eq!(again, (k.clone(), v.clone()));
    }
    let config = group.config.clone();
    let reversed = records.iter().rev().cloned();
    let restored = ConsumerGroup::from_records(group.group_id(), config, reversed, now_ms)
        .expect("the group's own records restore it");
    assert_eq!(restored.check_invariants(), Ok(()));
    assert_eq!(restored.describe(), group.describe());
    assert_eq!(restored.to_records(), records, "the same records again");
    assert_eq!(restored.owners, group.owners);
    assert_eq!(restored.static_members, group.static_members);
    assert_eq!(restored.subscribed_metadata, group.subscribed_metadata);
    for (id, m) in &group.members {
        assert_eq!(
            restored.members[id].resolved_topics, m.resolved_topics,
            "{id}"
        );
        assert_eq!(
            restored.members[id].session_deadline_ms,
            now_ms + SESSION_MS,
            "{id}"
        );
    }
    restored
}

fn member_states(group: &ConsumerGroup) -> Vec<(String, MemberState, i32)> {
    group
        .members
        .values()
        .map(|m| (m.member_id.clone(), m.state, m.member_epoch))
        .collect()
}

#[test]
fn a_stable_group_survives_a_coordinator_restart() {
    let mut h = Harness::new(&[("t", 6), ("other", 2)]);
    let mut clients = three_stable_members(&mut h);
    let epoch = h.group.group_epoch();
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);
    h.now_ms += 10_000;
    h.group = restored(&h.group, h.now_ms);
    assert_eq!(h.group.next_deadline_ms(), Some(h.now_ms + SESSION_MS));
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);

    // The members carry on at their epochs: nothing moves, the epoch stays.
    for c in &mut clients {
        let r = h.heartbeat(c);
        assert_eq!(
            (r.error_code, r.member_epoch),
            (ErrorCode::NONE, epoch),
            "{r:?}"
        );
        assert_eq!(r.assignment, None);
    }
    // A client that lost its coordinator sends everything again and hears the same.
    for c in &mut clients {
        let before = c.owned.clone();
        c.send_full = true;
        let r = h.heartbeat(c);
        assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
        assert_eq!(r.assignment.map(|a| partition_set(&a)), Some(before));
    }
    assert_eq!(h.group.group_epoch(), epoch, "no spurious rebalance");
    // One that missed its last epoch bump retries with the previous epoch.
    let mut late = clients[0].clone();
    late.epoch = h.group.members["a"].previous_member_epoch;
    assert!(late.epoch > 0 && late.epoch < epoch);
    let r = h.send(late.request());
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));

    // The group goes on from there: a fourth member joins at the next epoch.
    clients.push(Client::new("d", &["t"]));
    h.settle(&mut clients);
    assert_eq!(h.group.group_epoch(), epoch + 1);
    assert_eq!(clients.iter().map(|c| c.owned.len()).sum::<usize>(), 6);
}

#[test]
fn a_group_restored_mid_reconciliation_completes_it() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = three_stable_members(&mut h);
    let mut d = Client::new("d", &["t"]);
    h.heartbeat(&mut d);
    for c in &mut clients {
        h.heartbeat(c);
    }
    // One member heard it must give up a partition and has not said it did; d waits for it.
    let revoking: Vec<&Member> = h
        .group
        .members
        .values()
        .filter(|m| m.state == MemberState::UnrevokedPartitions)
        .collect();
    assert_eq!(revoking.len(), 1, "{:?}", member_states(&h.group));
    let revoking_id = revoking[0].member_id.clone();
    assert_eq!(revoking[0].pending_revocation.len(), 1);
    assert_eq!(
        h.group.members["d"].state,
        MemberState::UnreleasedPartitions
    );
    assert_eq!(h.group.state(), ConsumerGroupState::Reconciling);
    let epoch = h.group.group_epoch();

    h.now_ms += 5_000;
    h.group = restored(&h.group, h.now_ms);
    let revocation_ms = h.now_ms + i64::from(REBALANCE_MS);
    assert_eq!(
        h.group.members[&revoking_id].revocation_deadline_ms,
        Some(revocation_ms)
    );
    assert_eq!(h.group.next_deadline_ms(), Some(revocation_ms));

    // Left alone, the revoking member is fenced at its restored deadline.
    let mut stubborn = h.group.clone();
    let expired = stubborn.tick(revocation_ms);
    assert_eq!(
        expired,
        vec![Expired {
            member_id: revoking_id,
            reason: ExpiryReason::RebalanceTimeout,
        }]
    );

    // Heartbeating, the members finish the rebalance at the same epoch.
    clients.push(d);
    h.settle(&mut clients);
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(h.group.state(), ConsumerGroupState::Stable);
    let mut counts: Vec<usize> = clients.iter().map(|c| c.owned.len()).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 1, 2, 2]);
    assert_eq!(clients[3].owned.len(), 1, "d got the revoked partition");
}

#[test]
fn a_static_member_keeps_its_identity_across_a_restart() {
    let mut h = Harness::new(&[("t", 6)]);
    let mut clients = vec![
        Client::new("a", &["t"]).with_instance("ia"),
        Client::new("b", &["t"]),
    ];
    h.settle(&mut clients);
    let epoch = h.group.group_epoch();
    let a_owned = clients[0].owned.clone();
    h.group = restored(&h.group, h.now_ms);

    // Its instance id is still taken.
    let impostor = Client::new("x", &["t"]).with_instance("ia");
    assert_eq!(
        h.send(impostor.request()).error_code,
        UNRELEASED_INSTANCE_ID
    );
    // It leaves for a while, the coordinator moves again, and it comes back as a new
    // process (a new member id) to the same partitions, without a rebalance.
    let r = h.send(clients[0].leave_request(LEAVE_GROUP_STATIC_MEMBER_EPOCH));
    assert_eq!(r.error_code, ErrorCode::NONE);
    h.now_ms += 1_000;
    h.group = restored(&h.group, h.now_ms);
    assert_eq!(
        h.group.members["a"].member_epoch,
        LEAVE_GROUP_STATIC_MEMBER_EPOCH
    );
    let mut again = Client::new("a2", &["t"]).with_instance("ia");
    let r = h.heartbeat(&mut again);
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
    assert_eq!(again.owned, a_owned);
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(h.group.static_members["ia"], "a2");
    h.group = restored(&h.group, h.now_ms);
    clients[0] = again;
    for c in &mut clients {
        let r = h.heartbeat(c);
        assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
    }
}

#[test]
fn a_regex_subscription_is_restored_and_follows_new_topics() {
    let mut h = Harness::new(&[("t1", 2), ("t2", 2), ("u", 2), ("v", 1)]);
    let mut a = Client::new("a", &["u"]);
    a.regex = Some("t.*".into());
    a.assignor = Some("range".into());
    let mut b = Client::new("b", &[]);
    b.regex = Some("t.*".into());
    let mut clients = vec![a, b];
    h.settle(&mut clients);
    let epoch = h.group.group_epoch();
    h.group = restored(&h.group, h.now_ms);
    let resolved: Vec<&str> = h.group.members["a"]
        .resolved_topics
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(resolved, ["t1", "t2", "u"]);
    assert_eq!(h.group.assignor(), Assignor::Range);
    for c in &mut clients {
        c.send_full = true;
        let r = h.heartbeat(c);
        assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch));
    }
    assert_eq!(h.group.group_epoch(), epoch);

    // A topic that matches appears while nobody heartbeats; the next heartbeat sees it.
    h.topics.insert("t3".into(), (topic_id("t3", 0), 2));
    h.group = restored(&h.group, h.now_ms);
    h.settle(&mut clients);
    assert_eq!(h.group.group_epoch(), epoch + 1);
    let all: PartitionSet = clients.iter().flat_map(|c| c.owned.clone()).collect();
    assert!(all.contains(&tp("t3", 0)) && all.contains(&tp("t3", 1)));
}

#[test]
fn assigning_and_empty_groups_round_trip() {
    let mut h = Harness::new(&[("t", 4)]);
    let mut clients = three_stable_members(&mut h);
    let c = clients.pop().expect("three clients");
    h.send(c.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
    assert_eq!(h.group.state(), ConsumerGroupState::Assigning);
    h.group = restored(&h.group, h.now_ms);
    assert_eq!(h.group.state(), ConsumerGroupState::Assigning);
    h.settle(&mut clients);
    assert!(clients.iter().all(|c| c.owned.len() == 2));

    for c in &clients {
        h.send(c.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
    }
    let epoch = h.group.group_epoch();
    h.group = restored(&h.group, h.now_ms);
    assert_eq!(h.group.state(), ConsumerGroupState::Empty);
    assert_eq!(h.group.next_deadline_ms(), None);
    let mut e = Client::new("e", &["t"]);
    assert_eq!(h.heartbeat(&mut e).member_epoch, epoch + 1);
}

/// Re-encodes the value of `records`' record with key `version` (and member, for member
/// records) after `edit`.
fn edit_record(
    records: &[(Bytes, Bytes)],
    version: i16,
    member: Option<&str>,
    edit: impl FnOnce(&mut ConsumerGroupValue),
) -> Vec<(Bytes, Bytes)> {
    let mut records = records.to_vec();
    let at = records
        .iter()
        .position(|(k, _)| {
            let key = ConsumerGroupKey::decode(k).expect("a group record");
            key.version() == version && key.member_id() == member
        })
        .expect("the record is there");
    let (key, mut value) =
        consumer_group_records::decode_record(&records[at].0, &records[at].1).expect("decodes");
    edit(&mut value);
    records[at] = consumer_group_records::encode_record(&key, &value);
    records
}

#[test]
fn malformed_or_inconsistent_records_are_skipped_or_refused() {
    let mut h = Harness::new(&[("t", 6)]);
    let clients = three_stable_members(&mut h);
    let records = h.group.to_records();
    let config = ConsumerGroupConfig::default();
    let load =
        |records: Vec<(Bytes, Bytes)>| ConsumerGroup::from_records("g", config.clone(), records, 0);

    // Records of other groups and records that are no group's are skipped.
    let mut mixed = ConsumerGroup::new("g2", config.clone()).to_records();
    mixed.extend(records.iter().cloned());
    mixed.push((
        Bytes::from_static(&[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 0]),
        Bytes::from_static(b"an offset commit"),
    ));
    mixed.push((Bytes::from_static(&[0x7f]), Bytes::from_static(&[1, 2, 3])));
    mixed.push((Bytes::from_static(&[0, 3, 0, 2, b'g', b'3']), Bytes::new()));
    let group = load(mixed).expect("g's records are all there");
    assert_eq!(group.describe(), h.group.describe());
    assert_eq!(load(Vec::new()).map(|g| g.describe()), None);

    // A record of the group that does not decode: the group cannot be trusted.
    for i in 0..records.len() {
        let mut bad = records.clone();
        bad[i].1 = bad[i].1.slice(..bad[i].1.len() - 1);
        assert!(load(bad).is_none(), "record {i} truncated");
    }
    // A record missing: the epochs, or one of a member's two records.
    for (version, member) in [(3, None), (6, None), (5, Some("b")), (8, Some("b"))] {
        let missing: Vec<(Bytes, Bytes)> = records
            .iter()
            .filter(|(k, _)| {
                let key = ConsumerGroupKey::decode(k).expect("a group record");
                !(key.version() == version && key.member_id() == member)
            })
            .cloned()
            .collect();
        assert_eq!(missing.len(), records.len() - 1);
        assert!(load(missing).is_none(), "without {version} {member:?}");
    }
    // Without the topics' metadata the group loads (as Kafka 4.1 leaves it): the names of
    // the topics come back with the first heartbeat, which rebalances once.
    let without_metadata: Vec<(Bytes, Bytes)> = records
        .iter()
        .filter(|(k, _)| ConsumerGroupKey::decode(k).expect("a record").version() != 4)
        .cloned()
        .collect();
    let mut group = load(without_metadata).expect("loads");
    let epoch = group.group_epoch();
    let r = group.heartbeat(clients[0].request(), &h.topics, 1);
    assert_eq!((r.error_code, r.member_epoch), (ErrorCode::NONE, epoch + 1));

    // Values that decode but that no group can hold.
    type Edit = Box<dyn FnOnce(&mut ConsumerGroupValue)>;
    let a_assigned = topic_partitions(&h.group.members["a"].assigned);
    let cases: Vec<(&str, i16, Option<&str>, Edit)> = vec![
        (
            "unknown assignor",
            5,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::MemberMetadata(m) = v {
                    m.server_assignor = Some("cooperative-sticky".into());
                }
            }),
        ),
        (
            "invalid regex",
            5,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::MemberMetadata(m) = v {
                    m.subscribed_topic_regex = Some("(".into());
                }
            }),
        ),
        (
            "an instance id twice",
            5,
            Some("b"),
            Box::new(|v| {
                if let ConsumerGroupValue::MemberMetadata(m) = v {
                    m.instance_id = Some("i".into());
                }
            }),
        ),
        (
            "a partition held twice",
            8,
            Some("b"),
            Box::new(move |v| {
                if let ConsumerGroupValue::CurrentMemberAssignment(c) = v {
                    c.assigned_partitions = a_assigned;
                }
            }),
        ),
        (
            "a negative partition",
            8,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::CurrentMemberAssignment(c) = v {
                    c.assigned_partitions[0].1[0] = -1;
                }
            }),
        ),
        (
            "a member ahead of the assignment",
            8,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::CurrentMemberAssignment(c) = v {
                    c.member_epoch += 1;
                }
            }),
        ),
        (
            "a member that left",
            8,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::CurrentMemberAssignment(c) = v {
                    c.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
                }
            }),
        ),
        (
            "a stable member with partitions to revoke",
            8,
            Some("a"),
            Box::new(|v| {
                if let ConsumerGroupValue::CurrentMemberAssignment(c) = v {
                    c.partitions_pending_revocation = mem::take(&mut c.assigned_partitions);
                }
            }),
        ),
        (
            "a target ahead of the group",
            6,
            None,
            Box::new(|v| {
                if let ConsumerGroupValue::TargetAssignmentMetadata(t) = v {
                    t.assignment_epoch += 1;
                }
            }),
        ),
    ];
    for (what, version, member, edit) in cases {
        let mut instance_too = records.clone();
        if what == "an instance id twice" {
            instance_too = edit_record(&instance_too, 5, Some("a"), |v| {
                if let ConsumerGroupValue::MemberMetadata(m) = v {
                    m.instance_id = Some("i".into());
                }
            });
        }
        let bad = edit_record(&instance_too, version, member, edit);
        assert!(load(bad).is_none(), "{what}");
    }
    // A target for a member that is not there.
    let mut stray = records.clone();
    stray.push(consumer_group_records::encode_record(
        &ConsumerGroupKey::TargetAssignmentMember {
            group_id: "g".into(),
            member_id: "gone".into(),
        },
        &ConsumerGroupValue::TargetAssignmentMember(
            consumer_group_records::TargetAssignmentMemberValue {
                topic_partitions: Vec::new(),
            },
        ),
    ));
    assert!(load(stray).is_none());
}

#[test]
fn corrupt_records_never_panic_the_restored_group() {
    let mut h = Harness::new(&[("t", 6), ("u", 3)]);
    let mut clients = vec![
        Client::new("a", &["t"]).with_instance("ia"),
        Client::new("b", &["t", "u"]),
        Client::new("c", &["u"]),
    ];
    clients[2].regex = Some("t|x".into());
    h.settle(&mut clients);
    let mut d = Client::new("d", &["t"]);
    h.heartbeat(&mut d);
    h.heartbeat(&mut clients[0]);
    clients.push(d);
    let records = h.group.to_records();
    let mut rng = Rng::new(7);
    let mut restored_count = 0;
    for _ in 0..3_000 {
        let mut records = records.clone();
        let i = rng.below(records.len());
        let (key, value) = &mut records[i];
        let target = if rng.chance(20) { key } else { value };
        let mut bytes = target.to_vec();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(bytes.len());
            bytes[at] = rng.next() as u8;
        }
        *target = Bytes::from(bytes);
        let Some(mut group) = ConsumerGroup::from_records("g", h.group.config.clone(), records, 0)
        else {
            continue;
        };
        restored_count += 1;
        assert_eq!(group.check_invariants(), Ok(()));
        for c in &clients {
            let _ = group.heartbeat(c.request(), &h.topics, 1);
            let mut full = c.clone();
            full.send_full = true;
            let _ = group.heartbeat(full.request(), &h.topics, 2);
        }
        group.tick(i64::MAX);
        assert_eq!(group.check_invariants(), Ok(()));
    }
    assert!(restored_count > 100, "{restored_count}");
}

/// A simulated consumer for the random walk: it may revoke late, lose answers, leave, come
/// back as a new incarnation, or change its subscription.
struct Sim {
    client: Client,
    /// The latest assignment heard; `client.owned` may still hold more (late revocation).
    latest: PartitionSet,
    active: bool,
    incarnation: u32,
    base: String,
}

impl Sim {
    fn rejoin_as_new_incarnation(&mut self) {
        self.incarnation += 1;
        self.client.member_id = format!("{}-{}", self.base, self.incarnation);
        self.reset();
    }

    fn reset(&mut self) {
        self.client.epoch = 0;
        self.client.owned.clear();
        self.latest.clear();
        self.client.send_full = false;
    }
}

fn random_subscription(rng: &mut Rng, client: &mut Client, topics: &TopicsView) {
    let mut names: Vec<String> = topics.keys().filter(|_| rng.chance(50)).cloned().collect();
    if rng.chance(20) {
        names.push("not-yet".into());
    }
    client.topics = names;
    client.regex = match rng.below(4) {
        0 => Some("t.*".into()),
        1 => Some("u1|not-yet".into()),
        _ => None,
    };
    client.assignor = match rng.below(4) {
        0 => Some("range".into()),
        1 => Some("uniform".into()),
        _ => None,
    };
}

fn random_topics_change(rng: &mut Rng, topics: &mut TopicsView, created: &mut u8) {
    match rng.below(3) {
        0 => {
            *created += 1;
            let name = format!("{}{}", if rng.chance(50) { "t" } else { "u" }, created);
            let id = topic_id(&name, 0);
            topics.insert(name, (id, 1 + rng.below(4) as i32));
        }
        1 => {
            let names: Vec<String> = topics.keys().cloned().collect();
            let name = &names[rng.below(names.len())];
            topics.get_mut(name).expect("exists").1 += 1;
        }
        _ => {
            let names: Vec<String> = topics.keys().cloned().collect();
            let name = names[rng.below(names.len())].clone();
            *created += 1;
            topics.insert(
                name.clone(),
                (topic_id(&name, *created), 1 + rng.below(4) as i32),
            );
        }
    }
}

/// One heartbeat of a simulated consumer; the answer may be lost.
fn sim_heartbeat(
    rng: &mut Rng,
    group: &mut ConsumerGroup,
    sim: &mut Sim,
    topics: &TopicsView,
    now_ms: i64,
) {
    if rng.chance(70) {
        sim.client.owned = sim.latest.clone(); // finishes revoking
    }
    let r = group.heartbeat(sim.client.request(), topics, now_ms);
    if rng.chance(10) {
        sim.client.send_full = true; // the answer is lost; the client resends everything
        return;
    }
    match r.error_code {
        ErrorCode::NONE => {
            sim.client.learn(&r);
            if let Some(assignment) = &r.assignment {
                sim.latest = partition_set(assignment);
                if rng.chance(60) {
                    sim.client.owned = sim.latest.clone();
                } else {
                    sim.client.owned.extend(sim.latest.iter().copied());
                }
            }
        }
        UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => sim.reset(),
        GROUP_MAX_SIZE_REACHED => {
            sim.active = false;
            sim.reset();
        }
        code => panic!("unexpected error {code}: {r:?}"),
    }
}

/// Checks that hold after every step of the walk.
fn check_walk(group: &ConsumerGroup, sims: &[Sim], now_ms: i64, context: &str) {
    assert_eq!(group.check_invariants(), Ok(()), "{context}");
    let description = group.describe();
    let mut owned = PartitionSet::new();
    for sim in sims.iter().filter(|s| s.active) {
        let Some(member) = group.members.get(&sim.client.member_id) else {
            continue; // a zombie: removed, it does not know yet
        };
        let held: PartitionSet = member
            .assigned
            .union(&member.pending_revocation)
            .copied()
            .collect();
        assert!(
            sim.client.owned.is_subset(&held),
            "{context}: {} holds more than it may",
            sim.client.member_id
        );
        for p in &sim.client.owned {
            assert!(owned.insert(*p), "{context}: {p:?} owned by two members");
        }
    }
    for m in &description.members {
        assert!(m.member_epoch <= description.group_epoch, "{context}");
        if description.state == ConsumerGroupState::Stable {
            assert_eq!(
                m.assignment, m.target_assignment,
                "{context}: stable but not reconciled"
            );
        }
    }
    if let Some(deadline_ms) = group.next_deadline_ms() {
        assert!(deadline_ms > now_ms, "{context}: due timeout left");
    }
}

fn random_walk(seed: u64, steps: usize, seen: &mut BTreeSet<String>) {
    let mut rng = Rng::new(seed);
    let config = ConsumerGroupConfig {
        group_size_max: 6,
        ..ConsumerGroupConfig::default()
    };
    let mut group = ConsumerGroup::new("g", config);
    let mut topics = view(&[("t0", 3), ("u0", 4)]);
    let mut created = 0u8;
    let mut now_ms = 0i64;
    let mut sims: Vec<Sim> = (0..8)
        .map(|i| {
            let base = format!("m{i}");
            let mut client = Client::new(&format!("{base}-0"), &[]);
            if i % 3 == 0 {
                client = client.with_instance(&format!("i{i}"));
            }
            random_subscription(&mut rng, &mut client, &topics);
            Sim {
                client,
                latest: PartitionSet::new(),
                active: false,
                incarnation: 0,
                base,
            }
        })
        .collect();
    for step in 0..steps {
        let s = rng.below(sims.len());
        let context = format!("seed {seed} step {step}");
        match rng.below(24) {
            0..=11 => {
                sims[s].active = true;
                let away = sims[s].client.instance_id.as_ref().and_then(|instance| {
                    let id = group.static_members.get(instance)?;
                    let away = group.members[id].member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    (away && *id != sims[s].client.member_id).then(|| id.clone())
                });
                sim_heartbeat(&mut rng, &mut group, &mut sims[s], &topics, now_ms);
                if away.is_some_and(|id| !group.members.contains_key(&id)) {
                    seen.insert("static member replaced".into());
                }
            }
            12 if sims[s].active => {
                let epoch = if sims[s].client.instance_id.is_some() && rng.chance(60) {
                    LEAVE_GROUP_STATIC_MEMBER_EPOCH
                } else {
                    LEAVE_GROUP_MEMBER_EPOCH
                };
                let r = group.heartbeat(sims[s].client.leave_request(epoch), &topics, now_ms);
                assert!(
                    matches!(r.error_code, ErrorCode::NONE | UNKNOWN_MEMBER_ID),
                    "{context}: {r:?}"
                );
                sims[s].active = false;
                sims[s].rejoin_as_new_incarnation();
            }
            13 => {
                let sim = &mut sims[s];
                random_subscription(&mut rng, &mut sim.client, &topics);
                sim.client.send_full = true;
            }
            14 | 15 => random_topics_change(&mut rng, &mut topics, &mut created),
            16..=18 => {
                now_ms += rng.below(4_000) as i64;
                note_expiries(seen, group.tick(now_ms));
            }
            19 => {
                now_ms += rng.below(50_000) as i64;
                note_expiries(seen, group.tick(now_ms));
            }
            20 => {
                if let Some(deadline_ms) = group.next_deadline_ms() {
                    now_ms = deadline_ms;
                    note_expiries(seen, group.tick(now_ms));
                }
            }
            21 => {
                // A heartbeat from nowhere: an epoch ahead of the member's. It is
                // refused and changes nothing.
                let client = &sims[s].client;
                let server_epoch = group.members.get(&client.member_id).map(|m| m.member_epoch);
                let mut request = client.request();
                request.member_epoch =
                    server_epoch.unwrap_or(0).max(client.epoch).max(0) + 1 + rng.below(3) as i32;
                group.tick(now_ms);
                let before = group.describe();
                let r = group.heartbeat(request, &topics, now_ms);
                assert_ne!(r.error_code, ErrorCode::NONE, "{context}");
                assert_eq!(before, group.describe(), "{context}");
            }
            _ => {
                let client = &sims[s].client;
                let expected = match group.members.get(&client.member_id) {
                    None => UNKNOWN_MEMBER_ID,
                    Some(m) if m.member_epoch != client.epoch => STALE_MEMBER_EPOCH,
                    Some(_) => ErrorCode::NONE,
                };
                if client.epoch >= 0 && !group.is_empty() {
                    assert_eq!(
                        group.can_commit(&client.member_id, client.epoch),
                        expected,
                        "{context}"
                    );
                }
            }
        }
        check_walk(&group, &sims, now_ms, &context);
        seen.insert(group.state().as_str().to_owned());
        for m in group.members.values() {
            seen.insert(format!("member {:?}", m.state));
            if m.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                seen.insert("static member away".into());
            }
        }
    }
    wind_down(seed, &mut group, &mut sims, &topics, now_ms);
}

/// Every consumer turns honest and heartbeats in turn: the group must become stable with
/// every consumer holding its target.
fn wind_down(
    seed: u64,
    group: &mut ConsumerGroup,
    sims: &mut [Sim],
    topics: &TopicsView,
    mut now_ms: i64,
) {
    for round in 0..30 {
        now_ms += 1_000;
        for i in 0..sims.len() {
            let sim = &mut sims[i];
            if !sim.active {
                continue;
            }
            sim.client.owned = sim.latest.clone();
            let r = group.heartbeat(sim.client.request(), topics, now_ms);
            match r.error_code {
                ErrorCode::NONE => {
                    sim.client.learn(&r);
                    if let Some(assignment) = &r.assignment {
                        sim.latest = partition_set(assignment);
                        sim.client.owned = sim.latest.clone();
                    }
                }
                UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => sim.reset(),
                GROUP_MAX_SIZE_REACHED => {
                    sim.active = false;
                    sim.reset();
                }
                code => panic!("seed {seed}: unexpected {code}: {r:?}"),
            }
            check_walk(group, sims, now_ms, &format!("seed {seed} round {round}"));
        }
        let settled = group.state() == ConsumerGroupState::Stable
            && group
                .members
                .values()
                .all(|m| m.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            && sims.iter().filter(|s| s.active).all(|s| {
                group
                    .members
                    .get(&s.client.member_id)
                    .is_some_and(|m| m.member_epoch == s.client.epoch)
            });
        if settled {
            for sim in sims.iter().filter(|s| s.active) {
                let assigned = &group.members[&sim.client.member_id].assigned;
                assert_eq!(&sim.client.owned, assigned, "seed {seed}");
            }
            return;
        }
        // Static members that left for a while come back.
        for sim in sims
            .iter_mut()
            .filter(|s| !s.active && s.client.instance_id.is_some())
        {
            sim.active = true;
        }
    }
    panic!("seed {seed}: never stable: {:#?}", group.describe());
}

fn note_expiries(seen: &mut BTreeSet<String>, expired: Vec<Expired>) {
    seen.extend(expired.iter().map(|e| format!("{:?}", e.reason)));
}

#[test]
fn random_sequences_keep_the_invariants() {
    let mut seen = BTreeSet::new();
    for seed in 0..300 {
        random_walk(seed, 300, &mut seen);
    }
    // The walk reaches every group and member state, both timeouts and static members
    // coming back, so the checks above cover them.
    assert_eq!(seen.len(), 11, "{seen:?}");
}
