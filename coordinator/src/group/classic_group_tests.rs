use super::super::records::{self, CoordinatorRecord};
use super::*;
use crate::testing::Rng;

const SESSION_MS: i32 = 30_000;
const REBALANCE_MS: i32 = 10_000;

fn protocols(client: &str, names: &[&str]) -> Vec<(String, Bytes)> {
    names
        .iter()
        .map(|n| (n.to_string(), Bytes::from(format!("{client}:{n}"))))
        .collect()
}

fn join_request(member_id: &str, client: &str, instance: Option<&str>) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_owned(),
        group_instance_id: instance.map(str::to_owned),
        client_id: client.to_owned(),
        client_host: "/127.0.0.1".to_owned(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".to_owned(),
        protocols: protocols(client, &["range", "roundrobin"]),
        require_known_member_id: true,
    }
}

fn sync_request(member_id: &str, generation_id: i32) -> SyncRequest {
    SyncRequest {
        member_id: member_id.to_owned(),
        group_instance_id: None,
        generation_id,
        protocol_type: Some("consumer".to_owned()),
        protocol_name: Some("range".to_owned()),
        assignments: Vec::new(),
    }
}

/// A group driven by tests: collects every answer and checks the invariants after each call.
struct Harness {
    group: ClassicGroup,
    answers: HashMap<Ticket, Completed>,
    now_ms: i64,
}

impl Harness {
    fn new(config: GroupConfig) -> Self {
        Harness {
            group: ClassicGroup::new("g", config),
            answers: HashMap::new(),
            now_ms: 0,
        }
    }

    fn after_call(&mut self) {
        assert_eq!(self.group.check_invariants(), Ok(()));
        for (ticket, completed) in self.group.take_completed() {
            assert!(
                self.answers.insert(ticket, completed).is_none(),
                "answered twice"
            );
        }
        if let Some(deadline_ms) = self.group.next_deadline_ms() {
            assert!(deadline_ms > self.now_ms, "a due timeout was left behind");
        }
    }

    fn join(&mut self, request: JoinRequest) -> Reply<JoinResponse> {
        let reply = self.group.join(request, self.now_ms);
        self.after_call();
        reply
    }

    fn sync(&mut self, request: SyncRequest) -> Reply<SyncResponse> {
        let reply = self.group.sync(request, self.now_ms);
        self.after_call();
        reply
    }

    fn heartbeat(&mut self, member_id: &str, instance: Option<&str>, generation: i32) -> ErrorCode {
        let error = self
            .group
            .heartbeat(member_id, instance, generation, self.now_ms);
        self.after_call();
        error
    }

    fn leave(&mut self, leaving: &[(&str, Option<&str>)]) -> Vec<ErrorCode> {
        let leaving: Vec<LeavingMember> = leaving
            .iter()
            .map(|(id, instance)| LeavingMember {
                member_id: id.to_string(),
                group_instance_id: instance.map(str::to_owned),
            })
            .collect();
        let errors = self
            .group
            .leave(&leaving, self.now_ms)
            .expect("group alive");
        self.after_call();
        errors
    }

    fn tick(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
        self.group.tick(now_ms);
        self.after_call();
    }

    /// The answer to a join, now or from the collected answers.
    fn join_answer(&mut self, reply: Reply<JoinResponse>) -> Option<JoinResponse> {
        match reply {
            Reply::Now(response) => Some(response),
            Reply::Later(ticket) => match self.answers.remove(&ticket)? {
                Completed::Join(response) => Some(response),
                Completed::Sync(_) => panic!("a sync answer for a join ticket"),
            },
        }
    }

    fn sync_answer(&mut self, reply: Reply<SyncResponse>) -> Option<SyncResponse> {
        match reply {
            Reply::Now(response) => Some(response),
            Reply::Later(ticket) => match self.answers.remove(&ticket)? {
                Completed::Sync(response) => Some(response),
                Completed::Join(_) => panic!("a join answer for a sync ticket"),
            },
        }
    }

    /// A dynamic member's first JoinGroup (v4+): the MEMBER_ID_REQUIRED handshake.
    fn member_id_for(&mut self, client: &str) -> String {
        let reply = self.join(join_request("", client, None));
        let response = self.join_answer(reply).expect("answered at once");
        assert_eq!(response.error, MEMBER_ID_REQUIRED);
        assert!(response.member_id.starts_with(&format!("{client}-")));
        assert_eq!(response.generation_id, UNKNOWN_GENERATION_ID);
        response.member_id
    }

    /// Forms a generation: the dynamic clients get ids first, then everyone joins in order
    /// (the first leads) and the leader assigns each member its own id. Returns the ids.
    fn form_group(&mut self, clients: &[(&str, Option<&str>)]) -> Vec<String> {
        let handed: Vec<Option<String>> = clients
            .iter()
            .map(|(client, instance)| instance.is_none().then(|| self.member_id_for(client)))
            .collect();
        let mut replies = Vec::new();
        for ((client, instance), id) in clients.iter().zip(&handed) {
            let id = id.as_deref().unwrap_or("");
            replies.push(self.join(join_request(id, client, *instance)));
        }
        let answers: Vec<JoinResponse> = replies
            .into_iter()
            .map(|r| {
                self.join_answer(r)
                    .expect("the last join completes the rebalance")
            })
            .collect();
        let ids: Vec<String> = answers.iter().map(|a| a.member_id.clone()).collect();
        let generation = answers[0].generation_id;
        assert!(answers
            .iter()
            .all(|a| a.error == ErrorCode::NONE && a.generation_id == generation));
        let leader = answers[0].leader.clone();
        let followers: Vec<_> = ids
            .iter()
            .filter(|id| **id != leader)
            .map(|id| self.sync(sync_request(id, generation)))
            .collect();
        let mut leader_sync = sync_request(&leader, generation);
        leader_sync.assignments = ids
            .iter()
            .map(|id| (id.clone(), Bytes::from(format!("assigned:{id}"))))
            .collect();
        let reply = self.sync(leader_sync);
        assert!(matches!(reply, Reply::Now(_)));
        for reply in followers {
            assert_eq!(
                self.sync_answer(reply).map(|r| r.error),
                Some(ErrorCode::NONE)
            );
        }
        assert_eq!(self.group.state(), GroupState::Stable);
        ids
    }
}

fn harness() -> Harness {
    Harness::new(GroupConfig::default())
}

#[test]
fn three_members_form_one_generation_and_sync_assignments() {
    let mut h = harness();
    let a = h.member_id_for("a");
    let b = h.member_id_for("b");
    let c = h.member_id_for("c");
    assert_eq!(
        h.group.state(),
        GroupState::Empty,
        "handed-out ids are not members"
    );

    let ra = h.join(join_request(&a, "a", None));
    assert!(matches!(ra, Reply::Later(_)));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    let rb = h.join(join_request(&b, "b", None));
    assert!(matches!(rb, Reply::Later(_)), "c's id is still pending");
    let rc = h.join(join_request(&c, "c", None));
    let rc = h
        .join_answer(rc)
        .expect("the last join completes the rebalance");
    let ra = h.join_answer(ra).expect("answered");
    let rb = h.join_answer(rb).expect("answered");

    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
    assert_eq!(h.group.generation_id(), 1);
    for r in [&ra, &rb, &rc] {
        assert_eq!(r.error, ErrorCode::NONE);
        assert_eq!(r.generation_id, 1);
        assert_eq!(r.leader, a, "the first member to join leads");
        assert_eq!(r.protocol_type.as_deref(), Some("consumer"));
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
    }
    assert_eq!(
        (ra.member_id.as_str(), rb.member_id.as_str()),
        (a.as_str(), b.as_str())
    );
    let listed: Vec<(&str, &[u8])> = ra
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.metadata.as_ref()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (a.as_str(), &b"a:range"[..]),
            (b.as_str(), &b"b:range"[..]),
            (c.as_str(), &b"c:range"[..]),
        ]
    );
    assert!(
        rb.members.is_empty() && rc.members.is_empty(),
        "only the leader gets the list"
    );

    let sb = h.sync(sync_request(&b, 1));
    assert!(
        matches!(sb, Reply::Later(_)),
        "a follower waits for the leader"
    );
    let mut leader_sync = sync_request(&a, 1);
    leader_sync.assignments = vec![
        (a.clone(), Bytes::from_static(b"A")),
        (b.clone(), Bytes::from_static(b"B")),
        ("stranger".into(), Bytes::from_static(b"S")),
    ];
    let sa = h.sync(leader_sync);
    let sa = h.sync_answer(sa).expect("the leader is answered at once");
    assert_eq!(
        (sa.error, sa.assignment.as_ref()),
        (ErrorCode::NONE, &b"A"[..])
    );
    assert_eq!(sa.protocol_name.as_deref(), Some("range"));
    let sb = h
        .sync_answer(sb)
        .expect("the leader's sync answers the followers");
    assert_eq!(
        (sb.error, sb.assignment.as_ref()),
        (ErrorCode::NONE, &b"B"[..])
    );
    assert_eq!(h.group.state(), GroupState::Stable);
    let sc = h.sync(sync_request(&c, 1));
    let sc = h.sync_answer(sc).expect("Stable answers at once");
    assert_eq!(
        (sc.error, sc.assignment.as_ref()),
        (ErrorCode::NONE, &b""[..]),
        "left out: empty"
    );

    let described = h.group.describe();
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.protocol, "range");
    assert_eq!(described.members.len(), 3);
    assert_eq!(described.members[1].member_id, b);
    assert_eq!(described.members[1].client_id, "b");
    assert_eq!(described.members[1].metadata.as_ref(), b"b:range");
    assert_eq!(described.members[1].assignment.as_ref(), b"B");
    assert!(h.answers.is_empty(), "every ticket was claimed");
}

#[test]
fn protocol_is_the_common_one_most_members_prefer() {
    let mut h = harness();
    let ids: Vec<String> = ["a", "b", "c"].iter().map(|c| h.member_id_for(c)).collect();
    let prefs: [&[&str]; 3] = [
        &["sticky", "range", "roundrobin"],
        &["roundrobin", "range"],
        &["roundrobin", "sticky", "range"],
    ];
    let mut replies = Vec::new();
    for ((id, client), pref) in ids.iter().zip(["a", "b", "c"]).zip(prefs) {
        let mut request = join_request(id, client, None);
        request.protocols = protocols(client, pref);
        replies.push(h.join(request));
    }
    let last = replies.pop().map(|r| h.join_answer(r));
    assert_eq!(
        last.flatten().and_then(|r| r.protocol_name),
        Some("roundrobin".into())
    );
    assert_eq!(h.group.protocol_name(), Some("roundrobin"));
}

#[test]
fn a_fourth_member_triggers_a_rebalance_into_generation_2() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None), ("c", None)]);
    assert_eq!(h.group.generation_id(), 1);

    let d = h.member_id_for("d");
    assert_eq!(
        h.group.state(),
        GroupState::Stable,
        "a handed-out id changes nothing"
    );
    let rd = h.join(join_request(&d, "d", None));
    assert!(matches!(rd, Reply::Later(_)));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    for id in &ids {
        assert_eq!(h.heartbeat(id, None, 1), REBALANCE_IN_PROGRESS);
    }
    let mut replies: Vec<_> = ["a", "b", "c"]
        .iter()
        .zip(&ids)
        .map(|(client, id)| h.join(join_request(id, client, None)))
        .collect();
    replies.push(rd);
    let answers: Vec<JoinResponse> = replies
        .into_iter()
        .map(|r| h.join_answer(r).expect("all rejoined"))
        .collect();
    assert!(answers
        .iter()
        .all(|r| r.error == ErrorCode::NONE && r.generation_id == 2));
    assert_eq!(answers[0].leader, ids[0], "the leader stays while it stays");
    assert_eq!(answers[0].members.len(), 4);
    assert_eq!(h.group.member_count(), 4);
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
}

#[test]
fn a_silent_member_is_removed_after_its_session_timeout() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None), ("c", None)]);
    h.now_ms = 20_000;
    assert_eq!(h.heartbeat(&ids[0], None, 1), ErrorCode::NONE);
    assert_eq!(h.heartbeat(&ids[1], None, 1), ErrorCode::NONE);
    assert_eq!(
        h.group.next_deadline_ms(),
        Some(i64::from(SESSION_MS)),
        "c's session"
    );
    h.tick(29_999);
    assert_eq!(h.group.state(), GroupState::Stable);
    h.tick(30_000);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    assert_eq!(h.group.member_count(), 2);
    assert_eq!(h.heartbeat(&ids[0], None, 1), REBALANCE_IN_PROGRESS);
    assert_eq!(h.heartbeat(&ids[2], None, 1), UNKNOWN_MEMBER_ID);
    let ra = h.join(join_request(&ids[0], "a", None));
    let rb = h.join(join_request(&ids[1], "b", None));
    let rb = h.join_answer(rb).expect("both rejoined");
    let ra = h.join_answer(ra).expect("both rejoined");
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.members.len(), 2);
}

#[test]
fn a_member_that_does_not_rejoin_in_time_is_dropped_from_the_generation() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None), ("c", None)]);
    h.now_ms = 1_000;
    // The leader rejoining in Stable starts a rebalance.
    let ra = h.join(join_request(&ids[0], "a", None));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    h.now_ms = 2_000;
    let rb = h.join(join_request(&ids[1], "b", None));
    h.now_ms = 5_000;
    assert_eq!(
        h.heartbeat(&ids[2], None, 1),
        REBALANCE_IN_PROGRESS,
        "alive, not joining"
    );
    assert_eq!(
        h.group.next_deadline_ms(),
        Some(1_000 + i64::from(REBALANCE_MS))
    );
    h.tick(10_999);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    h.tick(11_000);
    let ra = h
        .join_answer(ra)
        .expect("completed at the rebalance timeout");
    let rb = h
        .join_answer(rb)
        .expect("completed at the rebalance timeout");
    assert_eq!(
        (ra.error, ra.generation_id, rb.generation_id),
        (ErrorCode::NONE, 2, 2)
    );
    let members: Vec<&str> = ra.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(members, vec![ids[0].as_str(), ids[1].as_str()]);
    assert_eq!(h.heartbeat(&ids[2], None, 1), UNKNOWN_MEMBER_ID);
    // Rejoining with the old id is refused: it must start over without one.
    let rc = h.join(join_request(&ids[2], "c", None));
    assert_eq!(h.join_answer(rc).map(|r| r.error), Some(UNKNOWN_MEMBER_ID));
}

#[test]
fn a_new_leader_is_elected_when_the_leader_does_not_rejoin() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None)]);
    let e = h.member_id_for("e");
    let re = h.join(join_request(&e, "e", None));
    let rb = h.join(join_request(&ids[1], "b", None));
    h.tick(i64::from(REBALANCE_MS));
    let rb = h.join_answer(rb).expect("completed");
    let re = h.join_answer(re).expect("completed");
    assert_eq!(rb.leader, ids[1]);
    assert_eq!(re.leader, ids[1]);
    assert_eq!(rb.members.len(), 2);
    assert_eq!(h.group.leader_id(), Some(ids[1].as_str()));
}

#[test]
fn leaving_rebalances_and_the_last_leave_empties_the_group() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None)]);
    assert_eq!(
        h.leave(&[(&ids[1], None), ("nobody", None), ("", Some("none"))]),
        vec![ErrorCode::NONE, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID]
    );
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    let ra = h.join(join_request(&ids[0], "a", None));
    let ra = h.join_answer(ra).expect("the only member rejoined");
    assert_eq!((ra.generation_id, ra.members.len()), (2, 1));
    assert_eq!(h.leave(&[(&ids[0], None)]), vec![ErrorCode::NONE]);
    assert_eq!(h.group.state(), GroupState::Empty);
    assert!(h.group.is_empty());
    assert_eq!(
        h.group.generation_id(),
        3,
        "the empty generation counts too"
    );
    assert_eq!(h.group.leader_id(), None);
    assert_eq!(h.group.protocol_name(), None);
    assert_eq!(h.group.next_deadline_ms(), None);
}

#[test]
fn a_leave_during_sync_answers_the_waiting_followers() {
    let mut h = harness();
    let a = h.member_id_for("a");
    let b = h.member_id_for("b");
    let c = h.member_id_for("c");
    for (id, client) in [(&a, "a"), (&b, "b"), (&c, "c")] {
        h.join(join_request(id, client, None));
    }
    h.answers.clear();
    let sb = h.sync(sync_request(&b, 1));
    assert_eq!(h.leave(&[(&c, None)]), vec![ErrorCode::NONE]);
    let sb = h.sync_answer(sb).expect("the rebalance answers it");
    assert_eq!(sb.error, REBALANCE_IN_PROGRESS);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
}

#[test]
fn a_pending_member_id_lapses_after_the_session_timeout() {
    let mut h = harness();
    let a = h.member_id_for("a");
    let _b = h.member_id_for("b");
    let ra = h.join(join_request(&a, "a", None));
    assert!(matches!(ra, Reply::Later(_)));
    h.tick(i64::from(SESSION_MS));
    let ra = h
        .join_answer(ra)
        .expect("b's id lapsed, so a's join completes");
    assert_eq!(
        (ra.error, ra.generation_id, ra.members.len()),
        (ErrorCode::NONE, 1, 1)
    );
    // A handed-out id can leave before it is used.
    let c = h.member_id_for("c");
    assert_eq!(h.leave(&[(&c, None)]), vec![ErrorCode::NONE]);
}

#[test]
fn a_static_member_restart_keeps_the_generation_and_fences_the_old_id() {
    let mut h = harness();
    let ids = h.form_group(&[("b", None), ("a", Some("inst-a")), ("c", None)]);
    let old = ids[1].clone();
    assert_eq!(h.group.generation_id(), 1);

    let restarted = h.join(join_request("", "a", Some("inst-a")));
    let restarted = h
        .join_answer(restarted)
        .expect("answered at once when Stable");
    assert_eq!(restarted.error, ErrorCode::NONE);
    assert_eq!(restarted.generation_id, 1);
    assert_ne!(restarted.member_id, old);
    assert_eq!(restarted.leader, ids[0]);
    assert!(restarted.members.is_empty() && !restarted.skip_assignment);
    assert_eq!(h.group.state(), GroupState::Stable);
    assert_eq!(h.group.generation_id(), 1);

    let new = restarted.member_id;
    assert_eq!(h.heartbeat(&old, Some("inst-a"), 1), FENCED_INSTANCE_ID);
    assert_eq!(h.heartbeat(&old, None, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&new, Some("inst-a"), 1), ErrorCode::NONE);
    let mut sync = sync_request(&old, 1);
    sync.group_instance_id = Some("inst-a".into());
    assert_eq!(
        h.sync(sync),
        Reply::Now(SyncResponse::error(FENCED_INSTANCE_ID))
    );
    let mut sync = sync_request(&new, 1);
    sync.group_instance_id = Some("inst-a".into());
    let synced = h.sync(sync);
    let synced = h.sync_answer(synced).expect("Stable");
    assert_eq!(
        synced.assignment,
        Bytes::from(format!("assigned:{old}")),
        "kept"
    );
    let old_join = h.join(join_request(&old, "a", Some("inst-a")));
    assert_eq!(
        h.join_answer(old_join).map(|r| r.error),
        Some(FENCED_INSTANCE_ID)
    );
    assert_eq!(
        h.group.can_commit(&old, Some("inst-a"), 1, 0),
        FENCED_INSTANCE_ID
    );

    // An administrator removes it by instance id.
    assert_eq!(h.leave(&[("", Some("inst-a"))]), vec![ErrorCode::NONE]);
    assert_eq!(h.group.member_count(), 2);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
}

#[test]
fn a_static_leader_restart_learns_it_leads_but_skips_assignment() {
    let mut h = harness();
    let ids = h.form_group(&[("a", Some("inst-a")), ("b", None)]);
    assert_eq!(h.group.leader_id(), Some(ids[0].as_str()));
    let restarted = h.join(join_request("", "a", Some("inst-a")));
    let restarted = h
        .join_answer(restarted)
        .expect("answered at once when Stable");
    assert_eq!(restarted.generation_id, 1);
    assert_eq!(restarted.leader, restarted.member_id);
    assert!(restarted.skip_assignment);
    assert_eq!(restarted.members.len(), 2);
    assert_eq!(h.group.leader_id(), Some(restarted.member_id.as_str()));
    assert_eq!(h.group.state(), GroupState::Stable);
}

#[test]
fn a_static_restart_that_changes_the_protocol_rebalances() {
    let mut h = harness();
    h.form_group(&[("b", Some("inst-b")), ("a", None)]);
    let mut request = join_request("", "b", Some("inst-b"));
    request.protocols = protocols("b", &["roundrobin"]);
    let reply = h.join(request);
    assert!(matches!(reply, Reply::Later(_)));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
}

#[test]
fn errors_illegal_generation_unknown_member_rebalance_in_progress() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None)]);
    assert_eq!(h.heartbeat(&ids[0], None, 0), ILLEGAL_GENERATION);
    assert_eq!(h.heartbeat("nobody", None, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(
        h.heartbeat(&ids[0], Some("unknown-instance"), 1),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        h.sync(sync_request(&ids[1], 7)),
        Reply::Now(SyncResponse::error(ILLEGAL_GENERATION))
    );
    assert_eq!(
        h.sync(sync_request("nobody", 1)),
        Reply::Now(SyncResponse::error(UNKNOWN_MEMBER_ID))
    );
    let unknown = h.join(join_request("a-made-up", "a", None));
    assert_eq!(
        h.join_answer(unknown).map(|r| r.error),
        Some(UNKNOWN_MEMBER_ID)
    );

    // A follower rejoining unchanged in Stable just gets the generation again.
    let again = h.join(join_request(&ids[1], "b", None));
    let again = h.join_answer(again).expect("at once");
    assert_eq!(
        (again.error, again.generation_id, h.group.state()),
        (ErrorCode::NONE, 1, GroupState::Stable)
    );

    // A changed subscription rebalances.
    let mut changed = join_request(&ids[1], "b", None);
    changed.protocols = protocols("b", &["range"]);
    assert!(matches!(h.join(changed), Reply::Later(_)));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.sync(sync_request(&ids[0], 1)),
        Reply::Now(SyncResponse::error(REBALANCE_IN_PROGRESS))
    );
    assert_eq!(h.heartbeat(&ids[0], None, 1), REBALANCE_IN_PROGRESS);
}

#[test]
fn rejoining_in_completing_rebalance_resends_the_generation() {
    let mut h = harness();
    let a = h.member_id_for("a");
    let b = h.member_id_for("b");
    h.join(join_request(&a, "a", None));
    h.join(join_request(&b, "b", None));
    h.answers.clear();
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
    let again = h.join(join_request(&a, "a", None));
    let again = h.join_answer(again).expect("at once");
    assert_eq!(
        (again.generation_id, again.members.len()),
        (1, 2),
        "the leader's list"
    );
    assert_eq!(
        h.heartbeat(&b, None, 1),
        ErrorCode::NONE,
        "heartbeats count while syncing"
    );
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
}

#[test]
fn a_superseded_join_is_answered() {
    let mut h = harness();
    let a = h.member_id_for("a");
    let _b = h.member_id_for("b");
    let first = h.join(join_request(&a, "a", None));
    let second = h.join(join_request(&a, "a", None));
    assert_eq!(
        h.join_answer(first).map(|r| r.error),
        Some(REBALANCE_IN_PROGRESS)
    );
    assert!(matches!(second, Reply::Later(_)));
}

#[test]
fn inconsistent_group_protocol() {
    let mut h = harness();
    let mut empty = join_request("", "x", None);
    empty.protocols.clear();
    let reply = h.join(empty);
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(INCONSISTENT_GROUP_PROTOCOL)
    );
    let ids = h.form_group(&[("a", None), ("b", None)]);

    let mut other_type = join_request("", "c", None);
    other_type.protocol_type = "connect".into();
    let reply = h.join(other_type);
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(INCONSISTENT_GROUP_PROTOCOL)
    );
    let mut no_common = join_request("", "c", None);
    no_common.protocols = protocols("c", &["sticky"]);
    let reply = h.join(no_common);
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(INCONSISTENT_GROUP_PROTOCOL)
    );
    let mut known_no_common = join_request(&ids[1], "b", None);
    known_no_common.protocols = protocols("b", &["sticky"]);
    let reply = h.join(known_no_common);
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(INCONSISTENT_GROUP_PROTOCOL)
    );

    let mut wrong_name = sync_request(&ids[0], 1);
    wrong_name.protocol_name = Some("roundrobin".into());
    assert_eq!(
        h.sync(wrong_name),
        Reply::Now(SyncResponse::error(INCONSISTENT_GROUP_PROTOCOL))
    );
    assert_eq!(
        h.group.state(),
        GroupState::Stable,
        "refusals change nothing"
    );
}

#[test]
fn invalid_session_timeout() {
    let mut h = harness();
    let mut request = join_request("", "a", None);
    request.session_timeout_ms = 1_000;
    let reply = h.join(request);
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(INVALID_SESSION_TIMEOUT)
    );
}

#[test]
fn group_max_size_reached() {
    let mut h = Harness::new(GroupConfig {
        group_size_max: 2,
        ..GroupConfig::default()
    });
    let ids = h.form_group(&[("a", None), ("b", None)]);
    let reply = h.join(join_request("", "c", None));
    let refused = h.join_answer(reply).expect("at once");
    assert_eq!(
        (refused.error, refused.member_id.as_str()),
        (GROUP_MAX_SIZE_REACHED, "")
    );
    let reply = h.join(join_request("", "c", Some("inst-c")));
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(GROUP_MAX_SIZE_REACHED)
    );
    // Members themselves may still rejoin.
    assert!(matches!(
        h.join(join_request(&ids[0], "a", None)),
        Reply::Later(_)
    ));

    // Handed-out ids are bounded too.
    let mut fresh = Harness::new(GroupConfig {
        group_size_max: 2,
        ..GroupConfig::default()
    });
    fresh.member_id_for("a");
    fresh.member_id_for("b");
    let reply = fresh.join(join_request("", "c", None));
    assert_eq!(
        fresh.join_answer(reply).map(|r| r.error),
        Some(GROUP_MAX_SIZE_REACHED)
    );
}

#[test]
fn can_commit_fences_by_member_and_generation() {
    let mut h = harness();
    assert_eq!(
        h.group.can_commit("", None, -1, 0),
        ErrorCode::NONE,
        "a simple consumer's commit"
    );
    let a = h.member_id_for("a");
    let b = h.member_id_for("b");
    h.join(join_request(&a, "a", None));
    h.join(join_request(&b, "b", None));
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
    assert_eq!(h.group.can_commit(&a, None, 1, 0), REBALANCE_IN_PROGRESS);
    let mut leader_sync = sync_request(&a, 1);
    leader_sync.assignments = vec![(a.clone(), Bytes::new()), (b.clone(), Bytes::new())];
    h.sync(leader_sync);
    assert_eq!(h.group.state(), GroupState::Stable);
    assert_eq!(h.group.can_commit(&a, None, 1, 0), ErrorCode::NONE);
    assert_eq!(h.group.can_commit(&a, None, 0, 0), ILLEGAL_GENERATION);
    assert_eq!(h.group.can_commit("nobody", None, 1, 0), UNKNOWN_MEMBER_ID);
    assert_eq!(
        h.group.can_commit("", None, -1, 0),
        UNKNOWN_MEMBER_ID,
        "not while active"
    );
    // Members may commit until they rejoin.
    assert_eq!(h.leave(&[(&b, None)]), vec![ErrorCode::NONE]);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    assert_eq!(h.group.can_commit(&a, None, 1, 0), ErrorCode::NONE);
    assert_eq!(h.group.can_commit(&b, None, 1, 0), UNKNOWN_MEMBER_ID);
}

#[test]
fn a_commit_keeps_the_session_alive() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None)]);
    h.now_ms = 25_000;
    assert_eq!(
        h.group.can_commit(&ids[0], None, 1, h.now_ms),
        ErrorCode::NONE
    );
    h.tick(40_000);
    assert_eq!(h.group.state(), GroupState::Stable);
    h.tick(55_000);
    assert_eq!(h.group.state(), GroupState::Empty);
}

#[test]
fn delete_only_an_empty_group() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None)]);
    assert_eq!(h.group.delete(), Err(NON_EMPTY_GROUP));
    assert_eq!(h.leave(&[(&ids[0], None)]), vec![ErrorCode::NONE]);
    assert_eq!(h.group.delete(), Ok(()));
    assert_eq!(h.group.state(), GroupState::Dead);
    assert_eq!(h.group.delete(), Err(GROUP_ID_NOT_FOUND));
    let reply = h.join(join_request("", "a", None));
    assert_eq!(
        h.join_answer(reply).map(|r| r.error),
        Some(COORDINATOR_NOT_AVAILABLE)
    );
    assert_eq!(
        h.group.heartbeat(&ids[0], None, 1, 0),
        COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(h.group.leave(&[], 0), Err(COORDINATOR_NOT_AVAILABLE));
    assert_eq!(
        h.group.can_commit("", None, -1, 0),
        COORDINATOR_NOT_AVAILABLE
    );
}

/// What a coordinator does across a failover: takes the latest change, writes it
/// (encodes), reads it back (decodes) and loads the group from it at `now_ms`.
fn persisted_and_loaded(h: &mut Harness, now_ms: i64) -> (GroupMetadataValue, Harness) {
    let Some(GroupMetadataChange::Store(group_id, value)) = h.group.take_metadata_change() else {
        panic!("a value to persist");
    };
    assert_eq!(group_id, "g");
    assert_eq!(h.group.take_metadata_change(), None, "taken once");
    let (key, bytes) = GroupMetadataChange::Store(group_id, value.clone()).encode();
    let CoordinatorRecord::GroupMetadata(GroupMetadataChange::Store(group_id, read)) =
        records::decode_record(Some(key), bytes)
    else {
        panic!("reads back");
    };
    assert_eq!(read, value);
    assert_eq!(group_id, "g");
    (value, load(read, now_ms))
}

fn load(value: GroupMetadataValue, now_ms: i64) -> Harness {
    let mut loaded = Harness::new(GroupConfig::default());
    loaded.group = ClassicGroup::from_metadata("g", GroupConfig::default(), value, now_ms);
    loaded.now_ms = now_ms;
    loaded.after_call();
    loaded
}

#[test]
fn a_synced_generation_is_persisted_and_loads_stable() {
    let mut h = harness();
    h.now_ms = 1_000;
    let a = h.member_id_for("a");
    let b = h.member_id_for("b");
    let c = h.member_id_for("c");
    let ra = h.join(join_request(&a, "a", None));
    let rb = h.join(join_request(&b, "b", None));
    h.join(join_request(&c, "c", None));
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
    assert_eq!(
        h.group.take_metadata_change(),
        None,
        "a join is not persisted"
    );
    let (ra, rb) = (h.join_answer(ra).unwrap(), h.join_answer(rb).unwrap());
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    h.now_ms = 2_000;
    let sb = h.sync(sync_request(&b, 1));
    assert_eq!(
        h.group.take_metadata_change(),
        None,
        "a follower's sync is not"
    );
    let mut leader_sync = sync_request(&a, 1);
    leader_sync.assignments = [&a, &b, &c]
        .iter()
        .map(|id| (id.to_string(), Bytes::from(format!("assigned:{id}"))))
        .collect();
    h.sync(leader_sync);
    assert_eq!(h.sync_answer(sb).map(|r| r.error), Some(ErrorCode::NONE));

    let (value, mut l) = persisted_and_loaded(&mut h, 500_000);
    assert_eq!(value.generation_id, 1);
    assert_eq!(value.protocol_type, "consumer");
    assert_eq!(value.protocol_name.as_deref(), Some("range"));
    assert_eq!(value.leader_id.as_deref(), Some(a.as_str()));
    assert_eq!(
        value.current_state_timestamp_ms, 2_000,
        "Stable since the sync"
    );
    let ids: Vec<&str> = value.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str(), c.as_str()], "in join order");
    let m = &value.members[1];
    assert_eq!(&m.subscription[..], b"b:range");
    assert_eq!(m.assignment, Bytes::from(format!("assigned:{b}")));
    assert_eq!(
        (m.client_id.as_str(), m.client_host.as_str()),
        ("b", "/127.0.0.1")
    );
    assert_eq!(
        (m.session_timeout_ms, m.rebalance_timeout_ms),
        (SESSION_MS, REBALANCE_MS)
    );
    assert_eq!(m.group_instance_id, None);

    assert_eq!(l.group.state(), GroupState::Stable);
    assert_eq!(l.group.generation_id(), 1);
    assert_eq!(l.group.leader_id(), Some(a.as_str()));
    assert_eq!(l.group.current_state_timestamp_ms(), Some(2_000));
    assert_eq!(l.group.describe(), h.group.describe(), "as it was");
    for id in [&a, &b, &c] {
        assert_eq!(l.heartbeat(id, None, 1), ErrorCode::NONE);
        assert_eq!(l.heartbeat(id, None, 0), ILLEGAL_GENERATION);
    }
    assert_eq!(l.group.can_commit(&b, None, 1, l.now_ms), ErrorCode::NONE);
    assert_eq!(
        l.group.can_commit("stray", None, 1, l.now_ms),
        UNKNOWN_MEMBER_ID
    );
    let sc = l.sync(sync_request(&c, 1));
    let sc = l.sync_answer(sc).unwrap();
    assert_eq!(sc.error, ErrorCode::NONE);
    assert_eq!(sc.assignment, Bytes::from(format!("assigned:{c}")));

    // Sessions restarted at the load: a member silent since then times out.
    l.tick(500_000 + i64::from(SESSION_MS) - 1);
    assert_eq!(l.heartbeat(&a, None, 1), ErrorCode::NONE);
    assert_eq!(l.heartbeat(&b, None, 1), ErrorCode::NONE);
    l.tick(500_000 + i64::from(SESSION_MS) + 1);
    assert_eq!(
        l.group.state(),
        GroupState::PreparingRebalance,
        "c timed out"
    );
    assert_eq!(l.heartbeat(&a, None, 1), REBALANCE_IN_PROGRESS);

    // A new member joins the loaded group: the next generation is 2.
    let mut h2 = load(value, 600_000);
    let d = h2.member_id_for("d");
    let rd = h2.join(join_request(&d, "d", None));
    assert_eq!(h2.group.state(), GroupState::PreparingRebalance);
    let rejoins: Vec<_> = [(&a, "a"), (&b, "b"), (&c, "c")]
        .into_iter()
        .map(|(id, client)| h2.join(join_request(id, client, None)))
        .collect();
    let rd = h2.join_answer(rd).expect("everyone rejoined");
    assert_eq!((rd.error, rd.generation_id), (ErrorCode::NONE, 2));
    for reply in rejoins {
        assert_eq!(h2.join_answer(reply).map(|r| r.generation_id), Some(2));
    }
    assert_eq!(h2.group.state(), GroupState::CompletingRebalance);
}

#[test]
fn an_empty_group_is_persisted_and_loads_empty_at_its_generation() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None)]);
    h.group.take_metadata_change();
    h.now_ms = 7_000;
    h.leave(&[(&ids[0], None)]);
    assert_eq!(
        h.group.take_metadata_change(),
        None,
        "a rebalance is not persisted"
    );
    h.leave(&[(&ids[1], None)]);
    assert_eq!(h.group.state(), GroupState::Empty);
    assert_eq!(h.group.generation_id(), 2);

    let (value, mut l) = persisted_and_loaded(&mut h, 100_000);
    assert_eq!(
        value,
        GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation_id: 2,
            protocol_name: None,
            leader_id: None,
            current_state_timestamp_ms: 7_000,
            members: Vec::new(),
        }
    );
    assert_eq!(l.group.state(), GroupState::Empty);
    assert_eq!(l.group.generation_id(), 2);
    assert_eq!(l.group.protocol_type(), Some("consumer"));
    assert_eq!(l.group.current_state_timestamp_ms(), Some(7_000));
    assert_eq!(l.group.next_deadline_ms(), None);
    assert_eq!(
        l.group
            .can_commit("", None, UNKNOWN_GENERATION_ID, l.now_ms),
        ErrorCode::NONE
    );
    assert_eq!(l.heartbeat(&ids[0], None, 2), UNKNOWN_MEMBER_ID);
    let ids = l.form_group(&[("a", None)]);
    assert_eq!(l.group.generation_id(), 3);
    assert_eq!(l.heartbeat(&ids[0], None, 3), ErrorCode::NONE);

    // Deleting it leaves a tombstone to write.
    let mut h = harness();
    h.tick(1);
    assert_eq!(h.group.take_metadata_change(), None);
    h.group.delete().unwrap();
    assert_eq!(
        h.group.take_metadata_change(),
        Some(GroupMetadataChange::Delete("g".into()))
    );
}

#[test]
fn static_members_keep_their_instance_ids_across_a_load() {
    let mut h = harness();
    let ids = h.form_group(&[("a", Some("ia")), ("b", Some("ib")), ("c", None)]);
    let (value, mut l) = persisted_and_loaded(&mut h, 50_000);
    let instances: Vec<Option<&str>> = value
        .members
        .iter()
        .map(|m| m.group_instance_id.as_deref())
        .collect();
    assert_eq!(instances, [Some("ia"), Some("ib"), None]);
    assert_eq!(l.heartbeat(&ids[0], Some("ia"), 1), ErrorCode::NONE);
    assert_eq!(l.heartbeat(&ids[2], Some("ia"), 1), FENCED_INSTANCE_ID);
    assert_eq!(
        l.group.can_commit(&ids[1], Some("ib"), 1, l.now_ms),
        ErrorCode::NONE
    );

    // b restarts: it replaces its old member id without a rebalance, and that is persisted.
    let rb = l.join(join_request("", "b", Some("ib")));
    let rb = l.join_answer(rb).unwrap();
    assert_eq!((rb.error, rb.generation_id), (ErrorCode::NONE, 1));
    assert_ne!(rb.member_id, ids[1]);
    assert_eq!(l.group.state(), GroupState::Stable);
    assert_eq!(l.heartbeat(&ids[1], Some("ib"), 1), FENCED_INSTANCE_ID);
    let (value, mut l2) = persisted_and_loaded(&mut l, 60_000);
    assert_eq!(value.members[1].member_id, rb.member_id);
    assert_eq!(value.members[1].group_instance_id.as_deref(), Some("ib"));
    assert_eq!(value.members[1].client_id, "b");
    assert_eq!(
        value.members[1].assignment,
        Bytes::from(format!("assigned:{}", ids[1])),
        "the replaced member keeps the assignment"
    );
    assert_eq!(l2.heartbeat(&rb.member_id, Some("ib"), 1), ErrorCode::NONE);
    assert_eq!(l2.heartbeat(&ids[1], Some("ib"), 1), FENCED_INSTANCE_ID);
    // The administrator removes a static member by instance id.
    assert_eq!(l2.leave(&[("", Some("ia"))]), vec![ErrorCode::NONE]);
    assert_eq!(l2.group.state(), GroupState::PreparingRebalance);
}

#[test]
fn a_failed_write_rebalances_the_generation() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None), ("b", None)]);
    let Some(GroupMetadataChange::Store(_, value)) = h.group.take_metadata_change() else {
        panic!("the synced generation");
    };
    h.group
        .metadata_write_failed(value.generation_id - 1, h.now_ms);
    assert_eq!(
        h.group.state(),
        GroupState::Stable,
        "another generation's write"
    );
    h.group.metadata_write_failed(value.generation_id, h.now_ms);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    h.after_call();
    assert_eq!(h.heartbeat(&ids[1], None, 1), REBALANCE_IN_PROGRESS);
}

#[test]
fn loading_tolerates_values_no_group_wrote() {
    let member = |id: &str, instance: Option<&str>| MemberMetadata {
        member_id: id.into(),
        group_instance_id: instance.map(Into::into),
        client_id: "c".into(),
        client_host: "h".into(),
        rebalance_timeout_ms: 0,
        session_timeout_ms: -5,
        subscription: Bytes::new(),
        assignment: Bytes::new(),
    };
    let value = GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation_id: 4,
        protocol_name: Some("range".into()),
        leader_id: Some("gone".into()),
        current_state_timestamp_ms: -1,
        members: vec![
            member("m1", Some("i")),
            member("m1", None),
            member("m2", Some("i")),
            member("m3", None),
        ],
    };
    let config = GroupConfig::default();
    let group = ClassicGroup::from_metadata("g", config.clone(), value.clone(), 10);
    assert_eq!(group.check_invariants(), Ok(()));
    assert_eq!(group.member_count(), 2, "repeats keep the first");
    assert_eq!(group.leader_id(), Some("m1"));
    assert_eq!(group.current_state_timestamp_ms(), None);
    assert!(group.next_deadline_ms().is_some_and(|d| d > 10));

    let no_protocol = GroupMetadataValue {
        protocol_name: None,
        ..value.clone()
    };
    let group = ClassicGroup::from_metadata("g", config, no_protocol, 10);
    assert_eq!(group.check_invariants(), Ok(()));
    assert_eq!(
        (group.state(), group.member_count(), group.generation_id()),
        (GroupState::Empty, 0, 4)
    );

    // group.max.size lowered since: a rebalance starts at once.
    let small = GroupConfig {
        group_size_max: 1,
        ..GroupConfig::default()
    };
    let group = ClassicGroup::from_metadata("g", small, value, 10);
    assert_eq!(group.check_invariants(), Ok(()));
    assert_eq!(group.state(), GroupState::PreparingRebalance);
}

#[test]
fn time_never_runs_backwards() {
    let mut h = harness();
    let ids = h.form_group(&[("a", None)]);
    h.tick(20_000);
    // A call stamped earlier than the last one is taken as happening at the last one.
    assert_eq!(h.group.heartbeat(&ids[0], None, 1, 0), ErrorCode::NONE);
    h.tick(49_999);
    assert_eq!(h.group.state(), GroupState::Stable);
}

struct Client {
    client_id: String,
    instance: Option<String>,
    member_id: String,
    generation_id: i32,
}

impl Client {
    fn learn(&mut self, completed: &Completed) {
        match completed {
            Completed::Join(r) if r.error == ErrorCode::NONE || r.error == MEMBER_ID_REQUIRED => {
                self.member_id = r.member_id.clone();
                self.generation_id = r.generation_id;
            }
            Completed::Join(r) if r.error == UNKNOWN_MEMBER_ID => self.member_id.clear(),
            _ => {}
        }
    }
}

fn delayed(initial_rebalance_delay_ms: i32) -> Harness {
    Harness::new(GroupConfig {
        initial_rebalance_delay_ms,
        ..GroupConfig::default()
    })
}

/// Two static members starting together form one generation: the first join out of
/// `Empty` waits the initial delay even though everyone has joined.
#[test]
fn initial_delay_gathers_members_into_one_generation() {
    let mut h = delayed(3_000);
    let a = h.join(join_request("", "a", Some("inst-a")));
    assert!(
        matches!(a, Reply::Later(_)),
        "the sole member waits for the delay"
    );
    h.tick(1_000);
    let b = h.join(join_request("", "b", Some("inst-b")));
    assert!(matches!(b, Reply::Later(_)));
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    // b was new in a generation-0 group: the wait is extended once, to 6 s.
    h.tick(3_000);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    assert_eq!(h.group.next_deadline_ms(), Some(6_000));
    h.tick(5_999);
    assert_eq!(h.group.state(), GroupState::PreparingRebalance);
    h.tick(6_000);
    let a = h.join_answer(a).expect("answered when the delay ends");
    let b = h.join_answer(b).expect("answered when the delay ends");
    assert_eq!((a.error, b.error), (ErrorCode::NONE, ErrorCode::NONE));
    assert_eq!((a.generation_id, b.generation_id), (1, 1));
    assert_eq!(a.leader, a.member_id);
    assert_eq!(
        a.members.len(),
        2,
        "the leader assigns both members at once"
    );
    assert_eq!(h.group.state(), GroupState::CompletingRebalance);
}

/// Extensions stop when the rebalance timeout is used up (Kafka's `remainingMs`).
#[test]
fn initial_delay_extensions_are_bounded_by_the_rebalance_timeout() {
    // REBALANCE_MS is 10 s: the delay runs 4 s, is extended by 4 s, then by the last 2 s.
    let mut h = delayed(4_000);
    let mut replies = vec![h.join(join_request("", "a", Some("inst-a")))];
    assert_eq!(h.group.next_deadline_ms(), Some(4_000));
    h.tick(1_000);
    replies.push(h.join(join_request("", "b", Some("inst-b"))));
    h.tick(4_000);
    assert_eq!(h.group.next_deadline_ms(), Some(8_000));
    h.tick(5_000);
    replies.push(h.join(join_request("", "c", Some("inst-c"))));
    h.tick(8_000);
    assert_eq!(h.group.next_deadline_ms(), Some(10_000));
    // A member arriving in the last stretch does not extend it further.
    h.tick(9_000);
    replies.push(h.join(join_request("", "late", Some("i-late"))));
    h.tick(10_000);
    for reply in replies {
        let r = h
            .join_answer(reply)
            .expect("answered at the end of the rebalance time");
        assert_eq!((r.error, r.generation_id), (ErrorCode::NONE, 1));
    }
    assert_eq!(h.group.member_count(), 4);
}

/// Without the delay (0), a sole member's join completes at once, as before.
#[test]
fn no_initial_delay_completes_at_once() {
    let mut h = delayed(0);
    let a = h.join(join_request("", "a", Some("inst-a")));
    let a = h.join_answer(a).expect("at once");
    assert_eq!((a.error, a.generation_id), (ErrorCode::NONE, 1));
}

/// Only the first rebalance out of `Empty` waits; a stable group's rebalance completes as
/// soon as every member rejoined.
#[test]
fn only_the_rebalance_out_of_empty_waits() {
    let mut h = delayed(3_000);
    let a = h.join(join_request("", "a", Some("inst-a")));
    h.tick(3_000);
    let a = h.join_answer(a).expect("after the delay");
    let leader_sync = SyncRequest {
        group_instance_id: Some("inst-a".into()),
        ..sync_request(&a.member_id, a.generation_id)
    };
    let synced = h.sync(leader_sync);
    assert!(h.sync_answer(synced).is_some());
    assert_eq!(h.group.state(), GroupState::Stable);
    let again = h.join(join_request(&a.member_id, "a", Some("inst-a")));
    let again = h.join_answer(again);
    assert!(again.is_some(), "answered without waiting for a delay");
}

/// Random clients doing random things (valid and not) at random times: no panic, the
/// invariants hold after every call, the generation never goes back, no due timeout is
/// left behind, every ticket is answered once, and once the clients go quiet every waiting
/// request is answered and the group empties. Every change to persist reads back as
/// written, and now and then the coordinator fails over: the group is loaded from the
/// latest value written (the waiting requests' connections are gone) and the walk goes on.
fn random_run(seed: u64, steps: usize, states_seen: &mut HashSet<&'static str>) {
    let mut rng = Rng::new(seed);
    let config = GroupConfig {
        group_size_max: 2 + rng.below(5),
        session_timeout_ms_min: 1_000,
        session_timeout_ms_max: 60_000,
        initial_rebalance_delay_ms: [0, 0, 500, 3_000][rng.below(4)],
    };
    let mut group = ClassicGroup::new("g", config);
    let mut clients: Vec<Client> = (0..6)
        .map(|i| Client {
            client_id: format!("c{i}"),
            instance: (i % 3 == 0).then(|| format!("inst{i}")),
            member_id: String::new(),
            generation_id: UNKNOWN_GENERATION_ID,
        })
        .collect();
    let mut waiting: HashMap<Ticket, usize> = HashMap::new();
    let mut now_ms = 0i64;
    let mut generation_seen = group.generation_id();
    let mut persisted: Option<GroupMetadataValue> = None;
    let names = ["range", "roundrobin", "sticky"];
    for step in 0..steps {
        if group.state() == GroupState::Dead && rng.chance(30) {
            // The coordinator starts a new group under the same id.
            group = ClassicGroup::new("g", group.config.clone());
            generation_seen = 0;
        }
        if rng.chance(2) {
            let config = group.config.clone();
            group = match persisted.clone() {
                Some(value) => ClassicGroup::from_metadata("g", config, value, now_ms),
                None => ClassicGroup::new("g", config),
            };
            waiting.clear();
            generation_seen = group.generation_id();
            assert_eq!(
                group.check_invariants(),
                Ok(()),
                "seed {seed} step {step}: load"
            );
            states_seen.insert(match group.state() {
                GroupState::Stable => "loaded Stable",
                _ => "loaded otherwise",
            });
        }
        let c = rng.below(clients.len());
        let member_id = if rng.chance(5) {
            format!("stray-{}", rng.below(3))
        } else {
            clients[c].member_id.clone()
        };
        let instance = clients[c].instance.clone().filter(|_| !rng.chance(10));
        let generation_id = if rng.chance(10) {
            rng.below(5) as i32 - 1
        } else {
            clients[c].generation_id
        };
        match rng.below(20) {
            0..=4 => {
                let mut chosen: Vec<&str> = if rng.chance(85) {
                    vec!["range", "roundrobin"]
                } else {
                    names.iter().copied().filter(|_| rng.chance(60)).collect()
                };
                if rng.chance(10) {
                    chosen.reverse();
                }
                let request = JoinRequest {
                    member_id,
                    group_instance_id: instance,
                    client_id: clients[c].client_id.clone(),
                    client_host: "/10.0.0.1".into(),
                    session_timeout_ms: if rng.chance(95) {
                        5_000 + rng.below(50_000) as i32
                    } else {
                        rng.below(70_000) as i32 - 10
                    },
                    rebalance_timeout_ms: if rng.chance(95) {
                        5_000 + rng.below(15_000) as i32
                    } else {
                        rng.below(20_000) as i32 - 10
                    },
                    protocol_type: if rng.chance(5) { "connect" } else { "consumer" }.into(),
                    protocols: protocols(&clients[c].client_id, &chosen),
                    require_known_member_id: rng.chance(80),
                };
                match group.join(request, now_ms) {
                    Reply::Now(r) => clients[c].learn(&Completed::Join(r)),
                    Reply::Later(ticket) => assert!(waiting.insert(ticket, c).is_none()),
                }
            }
            5..=9 => {
                let leads = group.leader_id() == Some(member_id.as_str());
                let assignments = if leads {
                    let mut ids: Vec<String> = group
                        .describe()
                        .members
                        .into_iter()
                        .map(|m| m.member_id)
                        .filter(|_| rng.chance(90))
                        .collect();
                    ids.push("stray-0".into());
                    ids.into_iter()
                        .map(|id| (id, Bytes::from_static(b"x")))
                        .collect()
                } else {
                    Vec::new()
                };
                let request = SyncRequest {
                    member_id,
                    group_instance_id: instance,
                    generation_id,
                    protocol_type: rng.chance(50).then(|| "consumer".into()),
                    protocol_name: rng.chance(30).then(|| names[rng.below(3)].into()),
                    assignments,
                };
                if let Reply::Later(ticket) = group.sync(request, now_ms) {
                    assert!(waiting.insert(ticket, c).is_none());
                }
            }
            10..=12 => {
                let error = group.heartbeat(&member_id, instance.as_deref(), generation_id, now_ms);
                if error == UNKNOWN_MEMBER_ID {
                    clients[c].member_id.clear();
                }
            }
            13 => {
                let by_instance = rng.chance(30);
                let leaving = LeavingMember {
                    member_id: if by_instance {
                        String::new()
                    } else {
                        member_id
                    },
                    group_instance_id: instance,
                };
                let result = group.leave(&[leaving], now_ms);
                assert_eq!(result.is_err(), group.state() == GroupState::Dead);
            }
            14..=16 => {
                now_ms += rng.below(3_000) as i64;
                group.tick(now_ms);
            }
            17 => {
                now_ms += rng.below(40_000) as i64;
                group.tick(now_ms);
            }
            18 => {
                if let Some(deadline_ms) = group.next_deadline_ms() {
                    now_ms = deadline_ms;
                    group.tick(now_ms);
                }
            }
            _ => {
                if rng.chance(10) {
                    if group.delete().is_ok() {
                        assert!(waiting.is_empty(), "only an empty group is deleted");
                    }
                } else {
                    group.can_commit(&member_id, instance.as_deref(), generation_id, now_ms);
                }
            }
        }
        for (ticket, completed) in group.take_completed() {
            let c = waiting
                .remove(&ticket)
                .unwrap_or_else(|| panic!("seed {seed} step {step}: unknown ticket"));
            clients[c].learn(&completed);
        }
        match group.take_metadata_change() {
            Some(GroupMetadataChange::Store(_, value)) => {
                assert!(value.generation_id <= group.generation_id());
                let read = records::decode_group_metadata_value(
                    records::encode_group_metadata_value(&value),
                );
                assert_eq!(read.as_ref(), Some(&value), "seed {seed} step {step}");
                persisted = Some(value);
            }
            Some(GroupMetadataChange::Delete(_)) => {
                assert_eq!(group.state(), GroupState::Dead);
                persisted = None;
            }
            None => {}
        }
        assert_eq!(group.check_invariants(), Ok(()), "seed {seed} step {step}");
        states_seen.insert(group.state().as_str());
        assert!(
            group.generation_id() >= generation_seen,
            "seed {seed} step {step}"
        );
        generation_seen = group.generation_id();
        if let Some(deadline_ms) = group.next_deadline_ms() {
            assert!(
                deadline_ms > now_ms,
                "seed {seed} step {step}: due timeout left"
            );
        }
    }
    // The clients go quiet: time alone answers every waiting request and empties the group.
    for _ in 0..1_000 {
        let Some(deadline_ms) = group.next_deadline_ms() else {
            break;
        };
        now_ms = deadline_ms;
        group.tick(now_ms);
        for (ticket, _) in group.take_completed() {
            assert!(
                waiting.remove(&ticket).is_some(),
                "seed {seed}: unknown ticket"
            );
        }
        assert_eq!(group.check_invariants(), Ok(()), "seed {seed} winding down");
    }
    assert!(
        waiting.is_empty(),
        "seed {seed}: {} never answered",
        waiting.len()
    );
    assert_eq!(group.member_count(), 0, "seed {seed}");
    assert!(
        matches!(group.state(), GroupState::Empty | GroupState::Dead),
        "seed {seed}"
    );
}

#[test]
fn random_sequences_keep_the_invariants() {
    let mut states_seen = HashSet::new();
    for seed in 0..400 {
        random_run(seed, 400, &mut states_seen);
    }
    // The walk reaches every state and loads groups with and without members, so the
    // checks above cover them all.
    assert_eq!(states_seen.len(), 7, "{states_seen:?}");
}
