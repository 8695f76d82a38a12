//! The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
//! OffsetCommit generation check) for one group: Kafka's `GroupMetadata` and `GroupCoordinator`
//! logic as a pure state machine.
//!
//! The group coordinator keeps one [`ClassicGroup`] per group on the shard that coordinates it,
//! and only that shard touches it. It holds no sockets, no timers and no clock: time comes in as
//! `now_ms` on every call, and every call first applies the timeouts due at `now_ms`, so answers
//! do not depend on how promptly [`ClassicGroup::tick`] ran. The coordinator calls `tick` at
//! [`ClassicGroup::next_deadline_ms`].
//!
//! A request that must wait (a JoinGroup until the rebalance completes, a follower's SyncGroup
//! until the leader's) gets a [`Ticket`]. Any call may answer waiting requests, its own or other
//! members', so the coordinator drains [`ClassicGroup::take_completed`] after every call. Every
//! ticket is answered exactly once, at the latest when the rebalance timeout or the sync timeout
//! of its generation runs out. A ticket whose connection went away is answered all the same; the
//! coordinator drops that answer.
//!
//! States, as in Kafka: `Empty` → `PreparingRebalance` (members join) → `CompletingRebalance`
//! (the leader assigns) → `Stable`, back to `PreparingRebalance` on any change of membership or
//! metadata, and `Dead` once deleted.
//!
//! The first rebalance out of `Empty` waits `group.initial.rebalance.delay.ms`, as Kafka's
//! `InitialDelayedJoin` does, so that members starting together join one generation: each new
//! member of a generation-0 group extends the wait by up to that delay again, within the
//! rebalance timeout, and the join completes when the wait ends, not when every member has
//! joined.
//!
//! Persistence, as in Kafka: the group's membership is written to `__consumer_offsets` as a
//! `GroupMetadataValue` ([`super::records`]) when the leader's SyncGroup completes a generation
//! (`Stable`, with every member's assignment), when a static member's restart replaces its
//! member id in a `Stable` group, and when the group becomes `Empty` (no members, its
//! generation and protocol type kept); a tombstone once it is deleted. Nothing else is written:
//! a rebalance in progress is lost on failover, and its members learn so from
//! `ILLEGAL_GENERATION` or `UNKNOWN_MEMBER_ID` and rejoin. After every call the coordinator
//! drains [`ClassicGroup::take_metadata_change`] (like `take_completed`); when it yields a
//! change, the coordinator appends it in the same step and commits it with the partition's next
//! group commit, without holding the answers (see `group::persist`: a change lost in a crash
//! only makes members rejoin); if the write fails it calls
//! [`ClassicGroup::metadata_write_failed`], so the next generation is written afresh. On load, [`ClassicGroup::from_metadata`]
//! rebuilds the group from its latest value: `Stable` at the persisted generation with every
//! member's session restarted, or `Empty`, so heartbeats, SyncGroups and commits at that
//! generation keep working across a failover.
//!
//! Invariants (checked after every call in debug builds, by `check_invariants`):
//! - the generation id never decreases, and grows by one each time a join completes;
//! - `leader` names a member while there are members, and is `None` otherwise;
//! - `Empty` and `Dead` have no members; `CompletingRebalance` and `Stable` have a protocol every
//!   member supports;
//! - waiting JoinGroups exist only in `PreparingRebalance`, waiting SyncGroups only in
//!   `CompletingRebalance`;
//! - in `Stable` every member holds an assignment (possibly empty);
//! - `group.instance.id` → member id maps exactly onto the static members.
//!
//! Where this differs from Kafka, and why:
//! - a member's protocols are checked against the *other* members, so a sole member may change
//!   its assignment strategy (Kafka counts the member's own old protocols);
//! - a JoinGroup or SyncGroup that a second one from the same member supersedes is answered
//!   `REBALANCE_IN_PROGRESS` (Kafka drops it unanswered), and a removed member's waiting SyncGroup
//!   is answered `UNKNOWN_MEMBER_ID`;
//! - member ids handed out with `MEMBER_ID_REQUIRED` and not yet used are bounded by
//!   `group.max.size` too, since a client can mint them in a loop;
//! - a tie in the protocol vote goes to the leader's preference (Kafka's is hash order);
//! - a static member rejoining without its member id when the group is full is let in as the
//!   member it replaces (Kafka refuses it and drops the instance's mapping);
//! - the leader's SyncGroup turns the group `Stable` at once, and a failed write of that
//!   generation rebalances it: Kafka stays in `CompletingRebalance` until the write commits
//!   and then resets the assignments. The coordinator holding the sync answers until the write
//!   commits makes the two look the same to clients;
//! - a failed write after a static member's restart rebalances the group (Kafka puts the old
//!   member id back and fails the join).

use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;

use super::classic_group_member::Member;
pub use super::classic_group_member::Ticket;
pub use super::classic_group_member::{JoinMember, LeavingMember, MemberDescription};
use super::records::{GroupMetadataChange, GroupMetadataValue, MemberMetadata};

/// Kafka error codes this module answers with (see `kafka_protocol::ResponseError`; a test
/// checks the numbers).
const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode::of(ResponseError::CoordinatorNotAvailable);
const ILLEGAL_GENERATION: ErrorCode = ErrorCode::of(ResponseError::IllegalGeneration);
const INCONSISTENT_GROUP_PROTOCOL: ErrorCode =
    ErrorCode::of(ResponseError::InconsistentGroupProtocol);
const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode::of(ResponseError::UnknownMemberId);
const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode::of(ResponseError::InvalidSessionTimeout);
const REBALANCE_IN_PROGRESS: ErrorCode = ErrorCode::of(ResponseError::RebalanceInProgress);
const NON_EMPTY_GROUP: ErrorCode = ErrorCode::of(ResponseError::NonEmptyGroup);
const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode::of(ResponseError::GroupIdNotFound);
const MEMBER_ID_REQUIRED: ErrorCode = ErrorCode::of(ResponseError::MemberIdRequired);
const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode::of(ResponseError::GroupMaxSizeReached);
const FENCED_INSTANCE_ID: ErrorCode = ErrorCode::of(ResponseError::FencedInstanceId);

/// The generation id in an error answer, and the one a consumer outside any group commits with.
pub const UNKNOWN_GENERATION_ID: i32 = -1;

/// How long a member that joined and has not yet been answered may wait before it is dropped
/// (Kafka's `GroupCoordinator.NewMemberJoinTimeoutMs`): its client may have gone away, and it
/// cannot heartbeat without a member id.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i32 = 300_000;

/// Per-group limits, from the broker's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.max.size`: members a group may hold. Also bounds the member ids handed out with
    /// `MEMBER_ID_REQUIRED` and not yet used. Kafka's default is `i32::MAX`.
    pub group_size_max: usize,
    /// `group.min.session.timeout.ms`; Kafka's default is 6 s.
    pub session_timeout_ms_min: i32,
    /// `group.max.session.timeout.ms`; Kafka's default is 30 min.
    pub session_timeout_ms_max: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance out of `Empty` waits for
    /// more members. Kafka's default is 3 s; [`GroupConfig::default`] has 0 (no wait) for tests.
    pub initial_rebalance_delay_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            group_size_max: i32::MAX as usize,
            session_timeout_ms_min: 6_000,
            session_timeout_ms_max: 1_800_000,
            initial_rebalance_delay_ms: 0,
        }
    }
}

/// A group's state, as DescribeGroups and ListGroups name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members; offsets may remain. A join starts a rebalance.
    Empty,
    /// Waiting for members to (re)join, until all have or the rebalance timeout runs out.
    PreparingRebalance,
    /// The join completed; waiting for the leader's SyncGroup with the assignment.
    CompletingRebalance,
    /// Every member has an assignment for the current generation.
    Stable,
    /// Deleted; the coordinator drops it and starts a new group on the next join.
    Dead,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups use.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// The answer to a request: now, or later under a ticket through [`ClassicGroup::take_completed`].
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<T> {
    Now(T),
    Later(Ticket),
}

/// A JoinGroup, one group's part of it, in domain terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    /// Empty on a member's first join.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has none; the handler passes the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    /// "consumer" for consumers; every member of a group must use the same.
    pub protocol_type: String,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a member without a member id first gets one with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// A JoinGroup answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: ErrorCode,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// Empty in an error answer.
    pub leader: String,
    /// The member's id: the one it sent, or the one assigned to it.
    pub member_id: String,
    /// Every member of the generation, for the leader only.
    pub members: Vec<JoinMember>,
    /// JoinGroup v9+ (KIP-814): the leader is told the members but must not assign, because
    /// the group stays `Stable` (a static leader rejoined).
    pub skip_assignment: bool,
}

impl JoinResponse {
    /// An error answer to `member_id`.
    pub fn error(error: ErrorCode, member_id: &str) -> Self {
        JoinResponse {
            error,
            generation_id: UNKNOWN_GENERATION_ID,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup, in domain terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    /// SyncGroup v5+; checked against the group's when present.
    pub protocol_type: Option<String>,
    /// SyncGroup v5+; checked against the group's when present.
    pub protocol_name: Option<String>,
    /// (member id, assignment), from the leader only; the rest send none.
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResponse {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// This member's assignment; empty in an error answer.
    pub assignment: Bytes,
}

impl SyncResponse {
    /// An error answer.
    pub fn error(error: ErrorCode) -> Self {
        SyncResponse {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A waiting request's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completed {
    Join(JoinResponse),
    Sync(SyncResponse),
}

/// A group as DescribeGroups shows it (Kafka's `GroupMetadata.summary`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    /// The chosen protocol when `Stable`, else empty.
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

/// One classic consumer group. See the module documentation.
#[derive(Debug)]
pub struct ClassicGroup {
    group_id: String,
    config: GroupConfig,
    state: GroupState,
    generation_id: i32,
    /// Set by the first member of a non-empty group; lingers while `Empty`.
    protocol_type: Option<String>,
    /// Chosen when a join completes; `None` while `Empty`.
    protocol_name: Option<String>,
    leader_id: Option<String>,
    /// In join order; the first remaining member succeeds a departed leader.
    members: IndexMap<String, Member>,
    /// `group.instance.id` → member id of the static members.
    static_members: HashMap<String, String>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED` → when they lapse unused.
    pending_members: HashMap<String, i64>,
    /// Members of the current generation that have not sent their SyncGroup yet.
    pending_sync_members: HashSet<String>,
    /// `PreparingRebalance` completes by then with whoever joined.
    rebalance_deadline_ms: Option<i64>,
    /// Set while the first rebalance out of `Empty` waits (Kafka's `InitialDelayedJoin`): the
    /// join completes only at `rebalance_deadline_ms`, and holds the rebalance time left after
    /// the current wait (Kafka's `remainingMs`).
    initial_delay_remaining_ms: Option<i64>,
    /// A member joined a generation-0 group during the initial wait, which extends it once more.
    new_member_added: bool,
    /// Members still in `pending_sync_members` by then are removed.
    sync_deadline_ms: Option<i64>,
    next_ticket: u64,
    completed: Vec<(Ticket, Completed)>,
    /// The latest `now_ms` seen; time never runs backwards here.
    now_ms: i64,
    /// When the group entered its state (Kafka's `currentStateTimestamp`); `None` until a call
    /// brought the time, unless loaded.
    current_state_timestamp_ms: Option<i64>,
    /// What the coordinator must write to `__consumer_offsets`, as of the latest change to
    /// what is persisted; taken by [`ClassicGroup::take_metadata_change`].
    metadata_change: Option<GroupMetadataChange>,
}

impl ClassicGroup {
    /// A new, `Empty` group at generation 0.
    pub fn new(group_id: impl Into<String>, config: GroupConfig) -> Self {
        ClassicGroup {
            group_id: group_id.into(),
            config,
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync_members: HashSet::new(),
            rebalance_deadline_ms: None,
            initial_delay_remaining_ms: None,
            new_member_added: false,
            sync_deadline_ms: None,
            next_ticket: 0,
            completed: Vec::new(),
            now_ms: i64::MIN,
            current_state_timestamp_ms: None,
            metadata_change: None,
        }
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The protocol chosen for the current generation; `None` while `Empty`.
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }

    pub fn leader_id(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Whether the group is `Empty` (no members; offsets may still be kept).
    pub fn is_empty(&self) -> bool {
        self.state == GroupState::Empty
    }

    /// Every member's metadata for the chosen protocol, while the group has a generation with
    /// members (not `Empty` or `Dead`): where OffsetDelete reads the subscribed topics from.
    pub fn chosen_protocol_metadata(&self) -> Vec<Bytes> {
        let Some(protocol) = self.protocol_name.as_deref() else {
            return Vec::new();
        };
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Vec::new();
        }
        self.members
            .values()
            .filter(|m| m.supports(protocol))
            .map(|m| m.metadata(protocol))
            .collect()
    }

    /// The group as DescribeGroups shows it.
    pub fn describe(&self) -> GroupDescription {
        let stable = self.state == GroupState::Stable;
        let protocol = match (stable, &self.protocol_name) {
            (true, Some(protocol)) => protocol.clone(),
            _ => String::new(),
        };
        let members = self
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata(&protocol)
                } else {
                    Bytes::new()
                },
                assignment: match (stable, &m.assignment) {
                    (true, Some(assignment)) => assignment.clone(),
                    _ => Bytes::new(),
                },
            })
            .collect();
        GroupDescription {
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol,
            members,
        }
    }

    /// JoinGroup. Answers now when nothing need wait (errors, `MEMBER_ID_REQUIRED`, a known
    /// member rejoining a settled generation unchanged, or the join that completes the
    /// rebalance); otherwise later, when the rebalance completes.
    pub fn join(&mut self, request: JoinRequest, now_ms: i64) -> Reply<JoinResponse> {
        self.advance(now_ms);
        let reply = self.join_inner(request);
        self.settle_rebalance();
        let reply = match reply {
            Reply::Later(ticket) => match self.take_own(ticket) {
                Some(Completed::Join(response)) => Reply::Now(response),
                _ => Reply::Later(ticket),
            },
            now => now,
        };
        self.debug_check();
        reply
    }

    /// SyncGroup. The leader's carries the assignment and answers every waiting member; a
    /// follower's waits for it, or is answered now once the group is `Stable`.
    pub fn sync(&mut self, request: SyncRequest, now_ms: i64) -> Reply<SyncResponse> {
        self.advance(now_ms);
        let reply = self.sync_inner(request);
        self.settle_rebalance();
        let reply = match reply {
            Reply::Later(ticket) => match self.take_own(ticket) {
                Some(Completed::Sync(response)) => Reply::Now(response),
                _ => Reply::Later(ticket),
            },
            now => now,
        };
        self.debug_check();
        reply
    }

    /// Heartbeat: keeps the member's session alive; `REBALANCE_IN_PROGRESS` tells it to rejoin.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: i64,
    ) -> ErrorCode {
        self.advance(now_ms);
        let error = self.heartbeat_inner(member_id, group_instance_id, generation_id);
        self.debug_check();
        error
    }

    /// LeaveGroup: one error code per leaving member, or the whole request's error.
    pub fn leave(
        &mut self,
        leaving: &[LeavingMember],
        now_ms: i64,
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        self.advance(now_ms);
        if self.state == GroupState::Dead {
            return Err(COORDINATOR_NOT_AVAILABLE);
        }
        let errors = leaving.iter().map(|m| self.leave_one(m)).collect();
        self.settle_rebalance();
        self.debug_check();
        Ok(errors)
    }

    /// Whether an OffsetCommit from this member in this generation may be written (0) or which
    /// error it gets: `generation_id < 0` in an `Empty` group is a commit from outside any group
    /// (assign() consumers, admin tools). A member's accepted commit counts as a heartbeat.
    pub fn can_commit(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: i64,
    ) -> ErrorCode {
        self.advance(now_ms);
        let error = self.can_commit_inner(member_id, group_instance_id, generation_id);
        self.debug_check();
        error
    }

    /// DeleteGroups: only an `Empty` group can be deleted; it becomes `Dead`.
    pub fn delete(&mut self) -> Result<(), ErrorCode> {
        match self.state {
            GroupState::Dead => Err(GROUP_ID_NOT_FOUND),
            GroupState::Empty => {
                self.transition_to(GroupState::Dead);
                self.pending_members.clear();
                self.metadata_change = Some(GroupMetadataChange::Delete(self.group_id.clone()));
                self.debug_check();
                Ok(())
            }
            _ => Err(NON_EMPTY_GROUP),
        }
    }

    /// Applies every timeout due at `now_ms`: unused member ids lapse, silent members are
    /// removed (starting a rebalance), a rebalance past its timeout completes with whoever
    /// joined, and members that did not sync in time are removed.
    pub fn tick(&mut self, now_ms: i64) {
        self.advance(now_ms);
        self.debug_check();
    }

    /// The answers to waiting requests produced since the last call, in order.
    pub fn take_completed(&mut self) -> Vec<(Ticket, Completed)> {
        std::mem::take(&mut self.completed)
    }

    /// When [`ClassicGroup::tick`] must run next; `None` when nothing is scheduled. Always later
    /// than the `now_ms` of the last call.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        if self.state == GroupState::Dead {
            return None;
        }
        let pending = self.pending_members.values().copied();
        let sessions = self.members.values().filter_map(Member::expiry_ms);
        let rebalance = self
            .rebalance_deadline_ms
            .filter(|_| self.state == GroupState::PreparingRebalance);
        let sync = self
            .sync_deadline_ms
            .filter(|_| !self.pending_sync_members.is_empty());
        pending.chain(sessions).chain(rebalance).chain(sync).min()
    }
}

// Persistence.
impl ClassicGroup {
    /// The group as Kafka persists it (`GroupMetadataValue`): every member with its metadata for
    /// the chosen protocol and its assignment (empty before the leader's SyncGroup). Meant for a
    /// `Stable` or `Empty` group, the two states Kafka writes; see the module documentation.
    pub fn to_metadata(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        let members = self
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: m.metadata(protocol),
                assignment: m.assignment.clone().unwrap_or_default(),
            })
            .collect();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone(),
            current_state_timestamp_ms: self.current_state_timestamp_ms.unwrap_or(-1),
            members,
        }
    }

    /// A group loaded from its latest persisted value, as Kafka loads one: with members it is
    /// `Stable` at the persisted generation, each member supporting only the chosen protocol
    /// (with its persisted subscription), keeping its assignment, and its session restarted at
    /// `now_ms`; without members it is `Empty` at that generation. A group over
    /// `group.max.size` (lowered since) starts a rebalance at once. A value that cannot be a
    /// group's (members without a protocol) loads `Empty`; a repeated member id or instance id
    /// keeps its first member.
    pub fn from_metadata(
        group_id: impl Into<String>,
        config: GroupConfig,
        value: GroupMetadataValue,
        now_ms: i64,
    ) -> Self {
        let mut group = ClassicGroup::new(group_id, config);
        group.now_ms = now_ms;
        group.generation_id = value.generation_id;
        group.protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
        group.current_state_timestamp_ms =
            Some(value.current_state_timestamp_ms).filter(|t| *t >= 0);
        let Some(protocol) = value.protocol_name else {
            group.debug_check();
            return group;
        };
        for m in value.members {
            let instance_taken = m
                .group_instance_id
                .as_ref()
                .is_some_and(|i| group.static_members.contains_key(i));
            if group.members.contains_key(&m.member_id) || instance_taken {
                continue;
            }
            if let Some(instance) = &m.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            let member = Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: Some(m.assignment),
                join_ticket: None,
                sync_ticket: None,
                is_new: false,
                session_deadline_ms: deadline_ms(now_ms, m.session_timeout_ms),
            };
            group.members.insert(m.member_id, member);
        }
        if group.members.is_empty() {
            group.debug_check();
            return group;
        }
        group.protocol_name = Some(protocol);
        group.leader_id = value
            .leader_id
            .filter(|l| group.members.contains_key(l))
            .or_else(|| group.members.keys().next().cloned());
        group.state = GroupState::Stable;
        if group.members.len() > group.config.group_size_max {
            // Let the members commit, then rejoin: those beyond the bound are refused.
            group.prepare_rebalance();
        }
        group.debug_check();
        group
    }

    /// What changed in what is persisted since the last call: `Store` after the leader's
    /// SyncGroup completed a generation (the group is `Stable`), after a static member's
    /// restart replaced its member id in a `Stable` group, and when the group became `Empty`;
    /// `Delete` (a tombstone) once it was deleted. Only the latest change is kept: the topic
    /// is compacted, so the latest record per group is all that matters.
    pub fn take_metadata_change(&mut self) -> Option<GroupMetadataChange> {
        self.metadata_change.take()
    }

    /// The write of the `Store` taken at `generation_id` failed: if the group is still `Stable`
    /// at that generation, it rebalances (Kafka's answer to a failed SyncGroup write), so the
    /// next generation is written afresh.
    pub fn metadata_write_failed(&mut self, generation_id: i32, now_ms: i64) {
        self.advance(now_ms);
        if self.state == GroupState::Stable && self.generation_id == generation_id {
            self.prepare_rebalance();
        }
        self.debug_check();
    }

    /// When the group entered its current state (Kafka's `currentStateTimestamp`, which offset
    /// expiry reads for an `Empty` group); `None` if unknown.
    pub fn current_state_timestamp_ms(&self) -> Option<i64> {
        self.current_state_timestamp_ms
    }
}

// JoinGroup.
impl ClassicGroup {
    fn join_inner(&mut self, request: JoinRequest) -> Reply<JoinResponse> {
        let timeout_ms = request.session_timeout_ms;
        if timeout_ms < self.config.session_timeout_ms_min
            || timeout_ms > self.config.session_timeout_ms_max
        {
            return Reply::Now(JoinResponse::error(
                INVALID_SESSION_TIMEOUT,
                &request.member_id,
            ));
        }
        if self.state == GroupState::Dead {
            return Reply::Now(JoinResponse::error(
                COORDINATOR_NOT_AVAILABLE,
                &request.member_id,
            ));
        }
        if !self.accept_joining_member(&request) {
            if self.members.contains_key(&request.member_id) {
                self.remove_member_and_update_group(&request.member_id);
            }
            return Reply::Now(JoinResponse::error(GROUP_MAX_SIZE_REACHED, ""));
        }
        if request.member_id.is_empty() {
            self.join_unknown_member(request)
        } else {
            self.join_known_member(request)
        }
    }

    /// Kafka's `acceptJoiningMember`, with a static member's unknown-id rejoin counted as the
    /// member it replaces.
    fn accept_joining_member(&self, request: &JoinRequest) -> bool {
        let member_id = match (&request.group_instance_id, request.member_id.is_empty()) {
            (Some(instance), true) => self.static_members.get(instance).map(String::as_str),
            (_, true) => None,
            (_, false) => Some(request.member_id.as_str()),
        };
        let member = member_id.and_then(|id| self.members.get(id));
        let size_max = self.config.group_size_max;
        if member_id.is_none() && self.pending_members.len() >= size_max {
            return false;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                member.is_some_and(|m| m.join_ticket.is_some())
                    || self.awaiting_join_count() < size_max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                member.is_some() || self.members.len() < size_max
            }
        }
    }

    fn join_unknown_member(&mut self, request: JoinRequest) -> Reply<JoinResponse> {
        let replaced = request
            .group_instance_id
            .as_ref()
            .and_then(|instance| self.static_members.get(instance).cloned());
        if !self.supports_protocols(&request, replaced.as_deref()) {
            return Reply::Now(JoinResponse::error(INCONSISTENT_GROUP_PROTOCOL, ""));
        }
        let member_id = format!("{}-{}", request.client_id, uuid::Uuid::new_v4());
        match replaced {
            Some(old_member_id) => self.replace_static_member(request, &old_member_id, member_id),
            None if request.group_instance_id.is_some() || !request.require_known_member_id => {
                self.add_member_and_rebalance(request, member_id)
            }
            None => {
                let deadline_ms = self.deadline_ms(request.session_timeout_ms);
                self.pending_members.insert(member_id.clone(), deadline_ms);
                Reply::Now(JoinResponse::error(MEMBER_ID_REQUIRED, &member_id))
            }
        }
    }

    fn join_known_member(&mut self, request: JoinRequest) -> Reply<JoinResponse> {
        let member_id = request.member_id.clone();
        if !self.supports_protocols(&request, Some(&member_id)) {
            return Reply::Now(JoinResponse::error(INCONSISTENT_GROUP_PROTOCOL, &member_id));
        }
        if self.pending_members.contains_key(&member_id) {
            if request.group_instance_id.is_some() {
                // The id was handed to a dynamic member; a static one must join without an id.
                self.pending_members.remove(&member_id);
                return Reply::Now(JoinResponse::error(UNKNOWN_MEMBER_ID, &member_id));
            }
            return self.add_member_and_rebalance(request, member_id);
        }
        let instance = request.group_instance_id.as_deref();
        if let Some(error) = self.validate_current_member(&member_id, instance) {
            return Reply::Now(JoinResponse::error(error, &member_id));
        }
        let is_leader = self.leader_id.as_deref() == Some(member_id.as_str());
        let unchanged = self.members[&member_id].protocols == request.protocols;
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(request),
            GroupState::CompletingRebalance if unchanged => {
                // It may have missed the join answer: give it the generation again.
                self.touch(&member_id);
                Reply::Now(self.generation_response(&member_id, is_leader, false))
            }
            // The leader rejoining forces a rebalance: it may have seen a change that affects
            // the assignment but not its metadata (a topic's partition count).
            GroupState::Stable if unchanged && !is_leader => {
                self.touch(&member_id);
                Reply::Now(self.generation_response(&member_id, false, false))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(request)
            }
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(JoinResponse::error(UNKNOWN_MEMBER_ID, &member_id))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        request: JoinRequest,
        member_id: String,
    ) -> Reply<JoinResponse> {
        let ticket = self.new_ticket();
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        if let Some(instance) = &request.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.pending_members.remove(&member_id);
        let member = Member {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout_ms: request.session_timeout_ms,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            protocols: request.protocols,
            assignment: None,
            join_ticket: Some(ticket),
            sync_ticket: None,
            is_new: true,
            session_deadline_ms: self.deadline_ms(NEW_MEMBER_JOIN_TIMEOUT_MS),
        };
        self.members.insert(member_id, member);
        if self.state == GroupState::PreparingRebalance && self.generation_id == 0 {
            self.new_member_added = true;
        }
        self.maybe_prepare_rebalance();
        Reply::Later(ticket)
    }

    /// A known member joins again: new metadata and timeouts, and a rebalance.
    fn update_member_and_rebalance(&mut self, request: JoinRequest) -> Reply<JoinResponse> {
        let ticket = self.new_ticket();
        let deadline_ms = self.deadline_ms(request.session_timeout_ms);
        let member = &mut self.members[&request.member_id];
        member.protocols = request.protocols;
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.session_deadline_ms = deadline_ms;
        let superseded = member.join_ticket.replace(ticket);
        if let Some(old) = superseded {
            let response = JoinResponse::error(REBALANCE_IN_PROGRESS, &request.member_id);
            self.completed.push((old, Completed::Join(response)));
        }
        self.maybe_prepare_rebalance();
        Reply::Later(ticket)
    }

    /// A static member restarted: its new member id replaces the old one, whose waiting
    /// requests are fenced. A `Stable` group keeps its generation unless the chosen protocol
    /// would change (Kafka compares only that: a restarted consumer's subscription carries new
    /// owned partitions and generation, so comparing its bytes would always rebalance).
    fn replace_static_member(
        &mut self,
        request: JoinRequest,
        old_member_id: &str,
        member_id: String,
    ) -> Reply<JoinResponse> {
        let Some(index) = self.members.get_index_of(old_member_id) else {
            return Reply::Now(JoinResponse::error(UNKNOWN_MEMBER_ID, ""));
        };
        let deadline_ms = self.deadline_ms(request.session_timeout_ms);
        // Keeps the member's place in join order (and so its turn as leader).
        let (_, mut member) = self
            .members
            .shift_remove_index(index)
            .expect("index from get_index_of");
        if let Some(old) = member.join_ticket.take() {
            let response = JoinResponse::error(FENCED_INSTANCE_ID, old_member_id);
            self.completed.push((old, Completed::Join(response)));
        }
        if let Some(old) = member.sync_ticket.take() {
            let response = SyncResponse::error(FENCED_INSTANCE_ID);
            self.completed.push((old, Completed::Sync(response)));
        }
        member.member_id = member_id.clone();
        member.client_id = request.client_id;
        member.client_host = request.client_host;
        member.protocols = request.protocols;
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.session_deadline_ms = deadline_ms;
        self.members.shift_insert(index, member_id.clone(), member);
        if self.leader_id.as_deref() == Some(old_member_id) {
            self.leader_id = Some(member_id.clone());
        }
        if self.pending_sync_members.remove(old_member_id) {
            self.pending_sync_members.insert(member_id.clone());
        }
        if let Some(instance) = &request.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol_name => {
                // The new member id must survive a coordinator failover, as Kafka persists it.
                self.record_metadata();
                // A static leader learns it leads (to watch metadata) but must not assign.
                let is_leader = self.leader_id.as_deref() == Some(member_id.as_str());
                Reply::Now(self.generation_response(&member_id, is_leader, is_leader))
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => {
                // In CompletingRebalance the leader may be assigning to the old id: start over.
                let ticket = self.new_ticket();
                self.members[&member_id].join_ticket = Some(ticket);
                self.maybe_prepare_rebalance();
                Reply::Later(ticket)
            }
            GroupState::Empty | GroupState::Dead => {
                unreachable!("a static member exists, so the group is neither Empty nor Dead")
            }
        }
    }

    /// Whether a member may join with these protocols: the group's protocol type, and at least
    /// one protocol every other member supports. `exclude` is the joining member's current id.
    fn supports_protocols(&self, request: &JoinRequest, exclude: Option<&str>) -> bool {
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        if self.protocol_type.as_deref() != Some(request.protocol_type.as_str()) {
            return false;
        }
        let others = self
            .members
            .values()
            .filter(|m| Some(m.member_id.as_str()) != exclude);
        // With no other member, any protocol will do.
        request
            .protocols
            .iter()
            .any(|(name, _)| others.clone().all(|m| m.supports(name)))
    }

    /// The answer for the current generation, outside a join completion.
    fn generation_response(
        &self,
        member_id: &str,
        with_members: bool,
        skip_assignment: bool,
    ) -> JoinResponse {
        JoinResponse {
            error: ErrorCode::NONE,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members: if with_members {
                self.current_member_metadata()
            } else {
                Vec::new()
            },
            skip_assignment,
        }
    }

    fn current_member_metadata(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }
}

// Rebalancing.
impl ClassicGroup {
    fn maybe_prepare_rebalance(&mut self) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::CompletingRebalance | GroupState::Stable
        ) {
            self.prepare_rebalance();
        }
    }

    fn prepare_rebalance(&mut self) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(REBALANCE_IN_PROGRESS);
        }
        let initial_delay_ms = self.config.initial_rebalance_delay_ms;
        let initial = self.state == GroupState::Empty && initial_delay_ms > 0;
        self.pending_sync_members.clear();
        self.sync_deadline_ms = None;
        self.transition_to(GroupState::PreparingRebalance);
        let rebalance_timeout_ms = self.rebalance_timeout_ms();
        if initial {
            self.new_member_added = false;
            let remaining_ms = i64::from(rebalance_timeout_ms) - i64::from(initial_delay_ms);
            self.initial_delay_remaining_ms = Some(remaining_ms.max(0));
            self.rebalance_deadline_ms = Some(self.deadline_ms(initial_delay_ms));
        } else {
            self.rebalance_deadline_ms = Some(self.deadline_ms(rebalance_timeout_ms));
        }
    }

    /// Completes the join once every member has joined and no handed-out id is pending, unless
    /// the initial wait is running: that completes only when it ends.
    fn settle_rebalance(&mut self) {
        let all_joined = self.members.values().all(|m| m.join_ticket.is_some())
            && self.pending_members.is_empty();
        if self.state == GroupState::PreparingRebalance
            && all_joined
            && self.initial_delay_remaining_ms.is_none()
        {
            self.complete_join();
        }
    }

    /// The rebalance deadline passed: the join completes, unless the initial wait is extended
    /// because a new member came (Kafka's `InitialDelayedJoin.onComplete`).
    fn rebalance_deadline_passed(&mut self) {
        if let Some(remaining_ms) = self.initial_delay_remaining_ms {
            if self.new_member_added && remaining_ms > 0 {
                self.new_member_added = false;
                let delay_ms = i64::from(self.config.initial_rebalance_delay_ms).min(remaining_ms);
                self.initial_delay_remaining_ms = Some(remaining_ms - delay_ms);
                // delay_ms <= the configured i32 delay, so the conversion cannot fail.
                let delay_ms = i32::try_from(delay_ms).unwrap_or(i32::MAX);
                self.rebalance_deadline_ms = Some(self.deadline_ms(delay_ms));
                return;
            }
            self.initial_delay_remaining_ms = None;
        }
        self.complete_join();
    }

    /// Kafka's `onCompleteJoin`: dynamic members that did not rejoin leave; the rest form the
    /// next generation, and every waiting join is answered (the leader's with the members).
    fn complete_join(&mut self) {
        let not_rejoined: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_ticket.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in &not_rejoined {
            self.remove_member(member_id);
        }
        if !self.elect_joined_leader() && !self.members.is_empty() {
            // Only static members that have not rejoined are left: wait until they do or
            // their sessions time out.
            self.rebalance_deadline_ms = Some(self.deadline_ms(self.rebalance_timeout_ms()));
            return;
        }
        self.init_next_generation();
        if self.state == GroupState::Empty {
            return;
        }
        let leader = self.leader_id.clone().unwrap_or_default();
        let mut leader_members = Some(self.current_member_metadata());
        let now_ms = self.now_ms;
        for member in self.members.values_mut() {
            let is_leader = member.member_id == leader;
            let response = JoinResponse {
                error: ErrorCode::NONE,
                generation_id: self.generation_id,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                leader: leader.clone(),
                member_id: member.member_id.clone(),
                members: if is_leader {
                    leader_members.take().unwrap_or_default()
                } else {
                    Vec::new()
                },
                skip_assignment: false,
            };
            if let Some(ticket) = member.join_ticket.take() {
                self.completed.push((ticket, Completed::Join(response)));
            }
            member.is_new = false;
            member.session_deadline_ms = deadline_ms(now_ms, member.session_timeout_ms);
            self.pending_sync_members.insert(member.member_id.clone());
        }
        self.sync_deadline_ms = Some(self.deadline_ms(self.rebalance_timeout_ms()));
    }

    /// Keeps the leader if it rejoined, else picks the first member that did. False when no
    /// member rejoined.
    fn elect_joined_leader(&mut self) -> bool {
        let Some(leader) = &self.leader_id else {
            return false;
        };
        if self.members[leader].join_ticket.is_some() {
            return true;
        }
        match self.members.values().find(|m| m.join_ticket.is_some()) {
            Some(joined) => {
                self.leader_id = Some(joined.member_id.clone());
                true
            }
            None => false,
        }
    }

    fn init_next_generation(&mut self) {
        // 2^31 rebalances do not happen; saturating keeps "never decreases" if they did.
        self.generation_id = self.generation_id.saturating_add(1);
        self.rebalance_deadline_ms = None;
        self.pending_sync_members.clear();
        self.sync_deadline_ms = None;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition_to(GroupState::Empty);
            self.record_metadata();
        } else {
            self.protocol_name = self.select_protocol();
            self.transition_to(GroupState::CompletingRebalance);
        }
    }

    /// The protocol every member supports that most members prefer; ties go to the leader's
    /// preference. `None` only for a group without members.
    fn select_protocol(&self) -> Option<String> {
        let leader = self.members.get(self.leader_id.as_deref()?)?;
        let mut candidates: Vec<(&str, usize)> = Vec::new();
        for (name, _) in &leader.protocols {
            let everyone = self.members.values().all(|m| m.supports(name));
            if everyone && !candidates.iter().any(|(c, _)| c == name) {
                candidates.push((name, 0));
            }
        }
        for member in self.members.values() {
            let vote = member
                .protocols
                .iter()
                .find_map(|(name, _)| candidates.iter().position(|(c, _)| c == name));
            if let Some(index) = vote {
                candidates[index].1 += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, votes) in candidates {
            if best.is_none_or(|(_, most)| votes > most) {
                best = Some((name, votes));
            }
        }
        debug_assert!(
            best.is_some(),
            "joins admit only members sharing a protocol"
        );
        best.map(|(name, _)| name.to_owned())
            .or_else(|| leader.protocols.first().map(|(name, _)| name.clone()))
    }

    /// The longest rebalance timeout among the members: how long a rebalance may wait.
    fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    fn awaiting_join_count(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.join_ticket.is_some())
            .count()
    }
}

// SyncGroup.
impl ClassicGroup {
    fn sync_inner(&mut self, request: SyncRequest) -> Reply<SyncResponse> {
        if self.state == GroupState::Dead {
            return Reply::Now(SyncResponse::error(COORDINATOR_NOT_AVAILABLE));
        }
        let member_id = request.member_id.as_str();
        let instance = request.group_instance_id.as_deref();
        if let Some(error) = self.validate_current_member(member_id, instance) {
            return Reply::Now(SyncResponse::error(error));
        }
        if request.generation_id != self.generation_id {
            return Reply::Now(SyncResponse::error(ILLEGAL_GENERATION));
        }
        let type_differs = request
            .protocol_type
            .as_ref()
            .is_some_and(|t| self.protocol_type.as_ref() != Some(t));
        let name_differs = request
            .protocol_name
            .as_ref()
            .is_some_and(|n| self.protocol_name.as_ref() != Some(n));
        if type_differs || name_differs {
            return Reply::Now(SyncResponse::error(INCONSISTENT_GROUP_PROTOCOL));
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(SyncResponse::error(UNKNOWN_MEMBER_ID))
            }
            GroupState::PreparingRebalance => {
                Reply::Now(SyncResponse::error(REBALANCE_IN_PROGRESS))
            }
            GroupState::CompletingRebalance => self.sync_completing(request),
            GroupState::Stable => {
                self.pending_sync_members.remove(member_id);
                self.touch(member_id);
                let assignment = self.members[member_id]
                    .assignment
                    .clone()
                    .unwrap_or_default();
                Reply::Now(self.sync_response(assignment))
            }
        }
    }

    fn sync_completing(&mut self, request: SyncRequest) -> Reply<SyncResponse> {
        let member_id = request.member_id;
        let ticket = self.new_ticket();
        let superseded = self.members[&member_id].sync_ticket.replace(ticket);
        if let Some(old) = superseded {
            let response = SyncResponse::error(REBALANCE_IN_PROGRESS);
            self.completed.push((old, Completed::Sync(response)));
        }
        self.pending_sync_members.remove(&member_id);
        if self.leader_id.as_deref() == Some(member_id.as_str()) {
            // Assignments for non-members are ignored; members left out get an empty one.
            let mut assignments: HashMap<String, Bytes> = request.assignments.into_iter().collect();
            for member in self.members.values_mut() {
                let assignment = assignments.remove(&member.member_id).unwrap_or_default();
                member.assignment = Some(assignment);
            }
            self.propagate_assignment();
            self.transition_to(GroupState::Stable);
            self.record_metadata();
        }
        Reply::Later(ticket)
    }

    /// Answers every waiting SyncGroup with the member's assignment.
    fn propagate_assignment(&mut self) {
        let now_ms = self.now_ms;
        for member in self.members.values_mut() {
            if let Some(ticket) = member.sync_ticket.take() {
                let response = SyncResponse {
                    error: ErrorCode::NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: member.assignment.clone().unwrap_or_default(),
                };
                self.completed.push((ticket, Completed::Sync(response)));
                member.session_deadline_ms = deadline_ms(now_ms, member.session_timeout_ms);
            }
        }
    }

    /// Clears the assignments and answers every waiting SyncGroup with `error`.
    fn reset_and_propagate_assignment_error(&mut self, error: ErrorCode) {
        let now_ms = self.now_ms;
        for member in self.members.values_mut() {
            member.assignment = None;
            if let Some(ticket) = member.sync_ticket.take() {
                let response = SyncResponse::error(error);
                self.completed.push((ticket, Completed::Sync(response)));
                member.session_deadline_ms = deadline_ms(now_ms, member.session_timeout_ms);
            }
        }
    }

    fn sync_response(&self, assignment: Bytes) -> SyncResponse {
        SyncResponse {
            error: ErrorCode::NONE,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }
}

// Heartbeat, LeaveGroup, OffsetCommit.
impl ClassicGroup {
    fn heartbeat_inner(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if let Some(error) = self.validate_current_member(member_id, group_instance_id) {
            return error;
        }
        if generation_id != self.generation_id {
            return ILLEGAL_GENERATION;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => UNKNOWN_MEMBER_ID,
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.touch(member_id);
                ErrorCode::NONE
            }
            GroupState::PreparingRebalance => {
                self.touch(member_id);
                REBALANCE_IN_PROGRESS
            }
        }
    }

    fn leave_one(&mut self, leaving: &LeavingMember) -> ErrorCode {
        let instance = leaving.group_instance_id.as_deref();
        if leaving.member_id.is_empty() {
            // An administrator removes a static member by its instance id.
            let Some(member_id) = instance.and_then(|i| self.static_members.get(i)).cloned() else {
                return UNKNOWN_MEMBER_ID;
            };
            self.remove_member_and_update_group(&member_id);
            return ErrorCode::NONE;
        }
        if self.pending_members.remove(&leaving.member_id).is_some() {
            return ErrorCode::NONE;
        }
        if let Some(error) = self.validate_current_member(&leaving.member_id, instance) {
            return error;
        }
        self.remove_member_and_update_group(&leaving.member_id);
        ErrorCode::NONE
    }

    fn can_commit_inner(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            return ErrorCode::NONE;
        }
        if let Some(error) = self.validate_current_member(member_id, group_instance_id) {
            return error;
        }
        if generation_id != self.generation_id {
            return ILLEGAL_GENERATION;
        }
        match self.state {
            // Members learn of a rebalance from heartbeats; until they rejoin, they may commit.
            GroupState::Stable | GroupState::PreparingRebalance => {
                self.touch(member_id);
                ErrorCode::NONE
            }
            // It has the new generation but no assignment yet.
            GroupState::CompletingRebalance => REBALANCE_IN_PROGRESS,
            GroupState::Empty | GroupState::Dead => UNKNOWN_MEMBER_ID,
        }
    }

    /// Kafka's `validateCurrentMember`: an instance id must map to this member id (else the
    /// caller is a fenced duplicate), and the member must exist.
    fn validate_current_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Option<ErrorCode> {
        if let Some(instance) = group_instance_id {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Some(FENCED_INSTANCE_ID),
                Some(_) => {}
                None => return Some(UNKNOWN_MEMBER_ID),
            }
        }
        (!self.members.contains_key(member_id)).then_some(UNKNOWN_MEMBER_ID)
    }
}

// Membership and time.
impl ClassicGroup {
    /// Removes a member and answers its waiting requests `UNKNOWN_MEMBER_ID`; a settled group
    /// rebalances without it, a rebalancing one may now complete.
    fn remove_member_and_update_group(&mut self, member_id: &str) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        if let Some(ticket) = member.join_ticket.take() {
            let response = JoinResponse::error(UNKNOWN_MEMBER_ID, "");
            self.completed.push((ticket, Completed::Join(response)));
        }
        if let Some(ticket) = member.sync_ticket.take() {
            let response = SyncResponse::error(UNKNOWN_MEMBER_ID);
            self.completed.push((ticket, Completed::Sync(response)));
        }
        self.remove_member(member_id);
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.maybe_prepare_rebalance();
        }
    }

    /// Drops a member that waits for nothing; the first remaining member succeeds a leader.
    fn remove_member(&mut self, member_id: &str) {
        let Some(member) = self.members.shift_remove(member_id) else {
            return;
        };
        assert!(
            member.join_ticket.is_none() && member.sync_ticket.is_none(),
            "a removed member's waiting requests are answered first"
        );
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync_members.remove(member_id);
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
    }

    /// Moves time to `now_ms` (never backwards) and applies every timeout due by then.
    fn advance(&mut self, now_ms: i64) {
        self.now_ms = self.now_ms.max(now_ms);
        if self.state == GroupState::Dead {
            return;
        }
        let now_ms = self.now_ms;
        self.pending_members
            .retain(|_, deadline_ms| *deadline_ms > now_ms);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.expiry_ms().is_some_and(|d| d <= now_ms))
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in &expired {
            self.remove_member_and_update_group(member_id);
        }
        let rebalance_due = self.rebalance_deadline_ms.is_some_and(|d| d <= now_ms);
        if self.state == GroupState::PreparingRebalance && rebalance_due {
            self.rebalance_deadline_passed();
        }
        let sync_due = self.sync_deadline_ms.is_some_and(|d| d <= now_ms);
        if sync_due {
            self.sync_deadline_ms = None;
            let not_synced: Vec<String> = self.pending_sync_members.drain().collect();
            for member_id in &not_synced {
                self.remove_member_and_update_group(member_id);
            }
        }
        // Pending ids lapsing or members leaving may let a rebalance complete.
        self.settle_rebalance();
    }

    fn transition_to(&mut self, state: GroupState) {
        if state != GroupState::PreparingRebalance {
            self.initial_delay_remaining_ms = None;
            self.new_member_added = false;
        }
        self.state = state;
        self.current_state_timestamp_ms = Some(self.now_ms).filter(|t| *t != i64::MIN);
    }

    /// Notes the group's value as of now for the coordinator to write.
    fn record_metadata(&mut self) {
        let value = self.to_metadata();
        self.metadata_change = Some(GroupMetadataChange::Store(self.group_id.clone(), value));
    }

    /// Refreshes a member's session.
    fn touch(&mut self, member_id: &str) {
        let now_ms = self.now_ms;
        if let Some(member) = self.members.get_mut(member_id) {
            member.session_deadline_ms = deadline_ms(now_ms, member.session_timeout_ms);
        }
    }

    fn deadline_ms(&self, timeout_ms: i32) -> i64 {
        deadline_ms(self.now_ms, timeout_ms)
    }

    fn new_ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Takes a call's own answer out of the completed list, to return it directly.
    fn take_own(&mut self, ticket: Ticket) -> Option<Completed> {
        let index = self.completed.iter().position(|(t, _)| *t == ticket)?;
        Some(self.completed.remove(index).1)
    }

    fn debug_check(&self) {
        debug_assert_eq!(self.check_invariants(), Ok(()), "group {}", self.group_id);
    }

    /// The module's invariants; `Err` names the first one broken.
    fn check_invariants(&self) -> Result<(), String> {
        let state = self.state;
        match (&self.leader_id, self.members.is_empty()) {
            (None, true) => {}
            (Some(leader), false) if self.members.contains_key(leader) => {}
            (leader, _) => return Err(format!("leader {leader:?} is not a member")),
        }
        if matches!(state, GroupState::Empty | GroupState::Dead) && !self.members.is_empty() {
            return Err(format!("{state:?} with members"));
        }
        if matches!(state, GroupState::Empty) && self.protocol_name.is_some() {
            return Err("Empty with a protocol".into());
        }
        if matches!(state, GroupState::CompletingRebalance | GroupState::Stable) {
            let Some(protocol) = &self.protocol_name else {
                return Err(format!("{state:?} without a protocol"));
            };
            if !self.members.values().all(|m| m.supports(protocol)) {
                return Err(format!("a member does not support {protocol}"));
            }
        }
        for member in self.members.values() {
            let id = &member.member_id;
            if member.join_ticket.is_some() && state != GroupState::PreparingRebalance {
                return Err(format!("{id} waits for a join in {state:?}"));
            }
            if member.sync_ticket.is_some() && state != GroupState::CompletingRebalance {
                return Err(format!("{id} waits for a sync in {state:?}"));
            }
            if state == GroupState::Stable && member.assignment.is_none() {
                return Err(format!("{id} has no assignment in Stable"));
            }
            if let Some(instance) = &member.group_instance_id {
                if self.static_members.get(instance) != Some(id) {
                    return Err(format!("static member {id} is not mapped"));
                }
            }
        }
        for (instance, id) in &self.static_members {
            let mapped = self
                .members
                .get(id)
                .and_then(|m| m.group_instance_id.as_ref());
            if mapped != Some(instance) {
                return Err(format!(
                    "instance {instance} maps to {id}, not a static member"
                ));
            }
        }
        if let Some(id) = self
            .pending_sync_members
            .iter()
            .find(|id| !self.members.contains_key(*id))
        {
            return Err(format!("pending sync {id} is not a member"));
        }
        Ok(())
    }
}

fn deadline_ms(now_ms: i64, timeout_ms: i32) -> i64 {
    // At least 1 ms ahead, so a timeout set while applying timeouts is never due at once.
    now_ms.saturating_add(i64::from(timeout_ms.max(1)))
}

#[cfg(test)]
#[path = "classic_group_tests.rs"]
mod tests;
