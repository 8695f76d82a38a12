//! KIP-848's consumer group protocol (`group.protocol=consumer`: ConsumerGroupHeartbeat, API key
//! 68, and ConsumerGroupDescribe) for one group: the consumer-group paths of Kafka's
//! `GroupMetadataManager`, `ConsumerGroup`, `CurrentAssignmentBuilder` and the server-side
//! assignors, as a pure state machine.
//!
//! The coordinator keeps one [`ConsumerGroup`] per group on the shard that coordinates it, and
//! only that shard touches it. It holds no sockets, no timers and no clock: time comes in as
//! `now_ms`, the topic metadata as a [`TopicsView`] on every heartbeat, and every call first
//! applies the timeouts due at `now_ms`, so answers do not depend on how promptly
//! [`ConsumerGroup::tick`] ran. The coordinator calls `tick` at
//! [`ConsumerGroup::next_deadline_ms`]. Nothing here does I/O: [`ConsumerGroup::to_records`]
//! describes the group as Kafka's `__consumer_offsets` records ([`consumer_records`]), which
//! the coordinator writes (the keys that changed since its last write, tombstones for those
//! gone), and [`ConsumerGroup::from_records`] rebuilds the group from them after the
//! coordinator moves, so members keep their epochs and partitions.
//!
//! How a rebalance goes:
//! - The *group epoch* grows by one when a member joins or is removed, when a member's
//!   subscription (topic names, regex) or server assignor changes, and when the metadata of the
//!   subscribed topics changes (a matching topic appears or goes, a topic id or partition count
//!   changes).
//! - The group's assignor (`uniform` or `range`, the one most members ask for) computes the
//!   *target assignment* for the group epoch. Like Kafka this happens on the next heartbeat, not
//!   at once; the target's epoch is the *assignment epoch* and the group is `Assigning` until then.
//! - Each member reconciles towards its target on its own heartbeats, incrementally
//!   (`Reconciliation`): it keeps what stays, must first revoke what moves away (the assignment
//!   in its answer shrinks and its member epoch stays; it acknowledges by sending owned
//!   partitions without them), and only then moves to the assignment epoch and gets the
//!   partitions nobody else holds any more. A partition still held by another member is
//!   *unreleased*: the member waits at the new epoch and gets it on a later heartbeat.
//! - A member that does not revoke within its rebalance timeout, or does not heartbeat within
//!   the session timeout, is removed (fenced).
//!
//! Invariants (checked after every call in debug builds, by `check_invariants`):
//! - `member_epoch <= assignment_epoch <= group_epoch` for every member (a static member that
//!   left temporarily has epoch -2);
//! - a partition is held (assigned or pending revocation) by at most one member, and `owners`
//!   records exactly the partitions members hold;
//! - partitions pending revocation exist only in `UnrevokedPartitions`, which always has a
//!   rebalance deadline;
//! - no partition is in two members' targets;
//! - `group.instance.id` → member id maps exactly onto the static members;
//! - a `Stable` group has every member's assignment equal to its target.
//!
//! Where this differs from Kafka, and why:
//! - regex subscriptions are resolved on the heartbeat that sees the topics change (Kafka
//!   resolves them asynchronously); the matcher ([`topic_regex`]) is our own, since keel-broker
//!   does not depend on `regex`: RE2 syntax without flags, Unicode classes, `\b` or `\Q..\E`
//!   (`^` and `$` are assertions anywhere; a topic matches only as a whole, as RE2/J
//!   `matches()`);
//! - racks are recorded and described but the assignors ignore them;
//! - the `uniform` assignor balances heterogeneous subscriptions only locally: no single
//!   partition can move to a less loaded subscriber and improve balance;
//! - the assignors treat a member's previous *target* as its current assignment (as Kafka);
//!   the `range` assignor is the classic one, not sticky.

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::mem;

use bytes::Bytes;
use keel_vocab::error::ResponseError;
use keel_vocab::{ErrorCode, TopicId, TopicIdPartition};
use topic_regex::TopicRegex;

use super::consumer_records::{
    self, ConsumerGroupKey, ConsumerGroupValue, CurrentMemberAssignmentValue, MemberMetadataValue,
    MetadataValue, PartitionMetadataValue, TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue, TopicMetadata,
};

/// Kafka error codes this module answers with (see `kafka_protocol::ResponseError`; a test
/// checks the numbers).
pub(crate) use crate::errors::NONE;
const UNKNOWN_MEMBER_ID: i16 = ErrorCode::of(ResponseError::UnknownMemberId).code();
const INVALID_REQUEST: i16 = ErrorCode::of(ResponseError::InvalidRequest).code();
const GROUP_MAX_SIZE_REACHED: i16 = ErrorCode::of(ResponseError::GroupMaxSizeReached).code();
const FENCED_INSTANCE_ID: i16 = ErrorCode::of(ResponseError::FencedInstanceId).code();
const FENCED_MEMBER_EPOCH: i16 = ErrorCode::of(ResponseError::FencedMemberEpoch).code();
const UNRELEASED_INSTANCE_ID: i16 = ErrorCode::of(ResponseError::UnreleasedInstanceId).code();
const UNSUPPORTED_ASSIGNOR: i16 = ErrorCode::of(ResponseError::UnsupportedAssignor).code();
const STALE_MEMBER_EPOCH: i16 = ErrorCode::of(ResponseError::StaleMemberEpoch).code();
const INVALID_REGULAR_EXPRESSION: i16 =
    ErrorCode::of(ResponseError::InvalidRegularExpression).code();

/// The member epoch a member sends to join (or rejoin) the group.
pub const JOIN_GROUP_MEMBER_EPOCH: i32 = 0;
/// The member epoch a member sends to leave the group for good.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch a static member sends to leave for a while: it keeps its instance id and
/// its partitions until it rejoins or its session times out.
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// Longest member, instance or rack id a member may send, in bytes.
pub const ID_BYTES_MAX: usize = 1024;
/// Most topic names one subscription may list.
pub const SUBSCRIBED_TOPICS_MAX: usize = 100_000;

/// Topics that a regex never matches (Kafka leaves internal topics out of regex resolution).
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// The topics the group can see, passed on every heartbeat: name → (topic id, partition count).
/// The coordinator passes user-visible topics; internal ones are never matched by a regex.
pub type TopicsView = BTreeMap<String, (TopicId, i32)>;

/// An assignment as the wire carries it: per topic id (ascending), partitions (ascending).
pub type TopicPartitions = Vec<(TopicId, Vec<i32>)>;

type PartitionSet = BTreeSet<TopicIdPartition>;

/// Which member holds each partition (assigned to it or pending its revocation).
type Owners = BTreeMap<TopicIdPartition, String>;

/// Per-group settings, from the broker's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`: a member without a heartbeat for this long is
    /// removed. Kafka's default is 45 s.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`, told to members. Kafka's default is 5 s.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`: members a group may hold. Kafka's default is `i32::MAX`.
    pub group_size_max: usize,
    /// The first of `group.consumer.assignors`: the assignor when no member asks for one.
    pub default_assignor: Assignor,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            group_size_max: i32::MAX as usize,
            default_assignor: Assignor::Uniform,
        }
    }
}

/// The server-side assignors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Assignor {
    /// Per topic, consecutive ranges of partitions over the subscribed members in member id
    /// order (Kafka's `range`).
    Range,
    /// Balanced counts, sticky, deterministic (Kafka's `uniform`).
    Uniform,
}

impl Assignor {
    /// The name members ask for in `ServerAssignor`.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::Uniform => "uniform",
        }
    }

    pub fn from_name(name: &str) -> Option<Assignor> {
        [Assignor::Range, Assignor::Uniform]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// A ConsumerGroupHeartbeat, in the coordinator's terms (the handler converts versions 0-1).
/// As on the wire, `None` (and `-1` for the rebalance timeout) means "unchanged since the
/// last heartbeat".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// Empty on a first heartbeat of version 0 lets the coordinator choose one.
    pub member_id: String,
    /// 0 to join, -1 to leave, -2 for a static member's temporary leave, else the member's.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    /// An empty string clears the regex.
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member holds; must be present and empty on a join.
    pub owned_partitions: Option<TopicPartitions>,
    /// From the request header and the connection, for ConsumerGroupDescribe.
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat. On an error only `error_code` and `error_message` are set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The partitions the member may use now; `None` when unchanged since the last answer to
    /// this member (and always sent on a join and on a full heartbeat, which clients send after
    /// an error, so a lost answer is repaired).
    pub assignment: Option<TopicPartitions>,
}

impl HeartbeatResponse {
    fn error(e: &HeartbeatError) -> HeartbeatResponse {
        HeartbeatResponse {
            error_code: e.code(),
            error_message: Some(e.to_string()),
            ..HeartbeatResponse::default()
        }
    }
}

/// Why a heartbeat was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("{0}")]
    InvalidRequest(&'static str),
    #[error("the member is not in the group")]
    UnknownMemberId,
    #[error("the member epoch is not the member's current or previous one")]
    FencedMemberEpoch,
    #[error("the instance id belongs to another member id")]
    FencedInstanceId,
    #[error("the instance id is still used by another member, which must leave first")]
    UnreleasedInstanceId,
    #[error("the server assignor is not one of: uniform, range")]
    UnsupportedAssignor,
    #[error("the group has reached its maximum size")]
    GroupMaxSizeReached,
    #[error("invalid subscribed topic regex: {0}")]
    InvalidRegularExpression(String),
}

impl HeartbeatError {
    pub fn code(&self) -> i16 {
        match self {
            HeartbeatError::InvalidRequest(_) => INVALID_REQUEST,
            HeartbeatError::UnknownMemberId => UNKNOWN_MEMBER_ID,
            HeartbeatError::FencedMemberEpoch => FENCED_MEMBER_EPOCH,
            HeartbeatError::FencedInstanceId => FENCED_INSTANCE_ID,
            HeartbeatError::UnreleasedInstanceId => UNRELEASED_INSTANCE_ID,
            HeartbeatError::UnsupportedAssignor => UNSUPPORTED_ASSIGNOR,
            HeartbeatError::GroupMaxSizeReached => GROUP_MAX_SIZE_REACHED,
            HeartbeatError::InvalidRegularExpression(_) => INVALID_REGULAR_EXPRESSION,
        }
    }
}

/// A group's state, as ConsumerGroupDescribe and ListGroups name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsumerGroupState {
    /// No members.
    Empty,
    /// The group epoch moved; the target assignment for it is not computed yet.
    Assigning,
    /// Some member has not reached its target assignment at the assignment epoch.
    Reconciling,
    /// Every member holds its target assignment at the assignment epoch.
    Stable,
}

impl ConsumerGroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// Where a member is in its reconciliation (Kafka's `MemberState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// Holds its target at its epoch, or has not looked at a newer target yet.
    Stable,
    /// Must revoke `pending_revocation` before going on; its epoch stays.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

/// A member removed by [`ConsumerGroup::tick`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub member_id: String,
    pub reason: ExpiryReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryReason {
    /// No heartbeat within `group.consumer.session.timeout.ms`.
    SessionTimeout,
    /// Did not revoke partitions within its rebalance timeout.
    RebalanceTimeout,
}

/// ConsumerGroupDescribe's view of the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: ConsumerGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor_name: &'static str,
    /// In member id order.
    pub members: Vec<MemberDescription>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    /// What the member may use now (without partitions pending revocation).
    pub assignment: Vec<TopicAssignment>,
    pub target_assignment: Vec<TopicAssignment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicAssignment {
    pub topic_id: TopicId,
    /// Empty when the topic is no longer subscribed (for instance, deleted).
    pub topic_name: String,
    pub partitions: Vec<i32>,
}

#[derive(Clone, Debug)]
struct Member {
    member_id: String,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    subscribed_topic_names: BTreeSet<String>,
    subscribed_topic_regex: Option<TopicRegex>,
    server_assignor: Option<Assignor>,
    /// The existing topics the subscription names or matches.
    resolved_topics: BTreeSet<String>,
    state: MemberState,
    member_epoch: i32,
    /// The epoch before the latest change; a heartbeat retried with it is accepted.
    previous_member_epoch: i32,
    /// Partitions the member may use.
    assigned: PartitionSet,
    /// Partitions the member must revoke; still held, so nobody else gets them yet.
    pending_revocation: PartitionSet,
    session_deadline_ms: i64,
    /// While in `UnrevokedPartitions`: when the member is fenced if it has not revoked.
    revocation_deadline_ms: Option<i64>,
}

impl Member {
    fn new(member_id: String, instance_id: Option<String>) -> Member {
        Member {
            member_id,
            instance_id,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: 0,
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            resolved_topics: BTreeSet::new(),
            state: MemberState::Stable,
            member_epoch: JOIN_GROUP_MEMBER_EPOCH,
            previous_member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
            assigned: PartitionSet::new(),
            pending_revocation: PartitionSet::new(),
            session_deadline_ms: 0,
            revocation_deadline_ms: None,
        }
    }

    fn set_epoch(&mut self, epoch: i32) {
        if epoch != self.member_epoch {
            self.previous_member_epoch = self.member_epoch;
            self.member_epoch = epoch;
        }
    }

    fn is_reconciled_to(&self, assignment_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == assignment_epoch
    }
}

/// A request's fields, checked before anything changes.
struct Validated {
    /// `Some(None)` clears the regex.
    regex: Option<Option<TopicRegex>>,
    assignor: Option<Assignor>,
    owned: Option<PartitionSet>,
}

/// The member a non-leaving heartbeat is for.
struct Admitted {
    member_id: String,
    is_new: bool,
}

/// What a heartbeat changes in its member besides the reconciliation.
struct MemberUpdate {
    rack_id: Option<String>,
    rebalance_timeout_ms: i32,
    names: Option<Vec<String>>,
    regex: Option<Option<TopicRegex>>,
    assignor: Option<Assignor>,
    client_id: String,
    client_host: String,
}

/// One consumer group (`group.protocol=consumer`).
#[derive(Clone, Debug)]
pub struct ConsumerGroup {
    group_id: String,
    config: ConsumerGroupConfig,
    group_epoch: i32,
    /// The epoch of `target`; at most `group_epoch`.
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    /// `group.instance.id` → member id, for static members.
    static_members: BTreeMap<String, String>,
    /// Member id → its partitions in the target assignment of `assignment_epoch`.
    target: BTreeMap<String, PartitionSet>,
    owners: Owners,
    /// Metadata of the topics some member resolves (its change bumps the group epoch).
    subscribed_metadata: TopicsView,
    /// Hash of the last topics view seen, so an unchanged view costs one pass and no copy.
    topics_fingerprint: Option<u64>,
}

impl ConsumerGroup {
    pub fn new(group_id: impl Into<String>, config: ConsumerGroupConfig) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.into(),
            config,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            owners: Owners::new(),
            subscribed_metadata: TopicsView::new(),
            topics_fingerprint: None,
        }
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .all(|m| m.is_reconciled_to(self.assignment_epoch))
        {
            ConsumerGroupState::Stable
        } else {
            ConsumerGroupState::Reconciling
        }
    }

    /// The assignor the target is computed with: the one most members ask for (ties to the
    /// first by name), else the configured default.
    pub fn assignor(&self) -> Assignor {
        let mut votes: BTreeMap<Assignor, usize> = BTreeMap::new();
        for assignor in self.members.values().filter_map(|m| m.server_assignor) {
            *votes.entry(assignor).or_default() += 1;
        }
        votes
            .into_iter()
            .max_by_key(|&(assignor, count)| (count, Reverse(assignor)))
            .map_or(self.config.default_assignor, |(assignor, _)| assignor)
    }

    /// Handles one ConsumerGroupHeartbeat at `now_ms`, with the topics as they are now.
    pub fn heartbeat(
        &mut self,
        request: HeartbeatRequest,
        topics: &TopicsView,
        now_ms: i64,
    ) -> HeartbeatResponse {
        self.tick(now_ms);
        let response = self
            .try_heartbeat(request, topics, now_ms)
            .unwrap_or_else(|e| HeartbeatResponse::error(&e));
        self.debug_check();
        response
    }

    /// Removes the members whose session or rebalance timeout ran out by `now_ms`.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Expired> {
        let expired: Vec<Expired> = self
            .members
            .values()
            .filter_map(|m| {
                let reason = if m.session_deadline_ms <= now_ms {
                    ExpiryReason::SessionTimeout
                } else if m.revocation_deadline_ms.is_some_and(|d| d <= now_ms) {
                    ExpiryReason::RebalanceTimeout
                } else {
                    return None;
                };
                Some(Expired {
                    member_id: m.member_id.clone(),
                    reason,
                })
            })
            .collect();
        for e in &expired {
            self.remove_member(&e.member_id);
        }
        self.debug_check();
        expired
    }

    /// When `tick` next has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.members
            .values()
            .flat_map(|m| [Some(m.session_deadline_ms), m.revocation_deadline_ms])
            .flatten()
            .min()
    }

    /// Whether `member_id` at `member_epoch` may commit offsets (OffsetCommit v9+): NONE,
    /// UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH when the epoch is not the member's current one
    /// (as Kafka, a newer epoch is stale too). A negative epoch (admin client, or a consumer
    /// without group management) may commit while the group has no members.
    pub fn can_commit(&self, member_id: &str, member_epoch: i32) -> i16 {
        if member_epoch < 0 && self.members.is_empty() {
            return NONE;
        }
        match self.members.get(member_id) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.member_epoch != member_epoch => STALE_MEMBER_EPOCH,
            Some(_) => NONE,
        }
    }

    /// The existing topics the members' subscriptions name or match (OffsetDelete keeps
    /// their offsets while the group has members).
    pub fn subscribed_topic_names(&self) -> std::collections::HashSet<String> {
        self.members
            .values()
            .flat_map(|m| m.resolved_topics.iter().cloned())
            .collect()
    }

    /// ConsumerGroupDescribe's answer for this group.
    pub fn describe(&self) -> GroupDescription {
        let names: BTreeMap<TopicId, &str> = self
            .subscribed_metadata
            .iter()
            .map(|(name, (id, _))| (*id, name.as_str()))
            .collect();
        let describe_set = |set: &PartitionSet| -> Vec<TopicAssignment> {
            topic_partitions(set)
                .into_iter()
                .map(|(topic_id, partitions)| TopicAssignment {
                    topic_id,
                    topic_name: names.get(&topic_id).copied().unwrap_or("").to_owned(),
                    partitions,
                })
                .collect()
        };
        let empty = PartitionSet::new();
        let members = self
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                subscribed_topic_regex: m
                    .subscribed_topic_regex
                    .as_ref()
                    .map(|r| r.source().to_owned()),
                assignment: describe_set(&m.assigned),
                target_assignment: describe_set(self.target.get(&m.member_id).unwrap_or(&empty)),
            })
            .collect();
        GroupDescription {
            group_id: self.group_id.clone(),
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor_name: self.assignor().name(),
            members,
        }
    }

    fn try_heartbeat(
        &mut self,
        request: HeartbeatRequest,
        topics: &TopicsView,
        now_ms: i64,
    ) -> Result<HeartbeatResponse, HeartbeatError> {
        let valid = validate(&request)?;
        if request.member_epoch < 0 {
            return self.leave(&request);
        }
        let joining = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH;
        let full_request = request.rebalance_timeout_ms != -1
            && (request.subscribed_topic_names.is_some()
                || request.subscribed_topic_regex.is_some())
            && request.owned_partitions.is_some();
        let Admitted { member_id, is_new } = if joining {
            self.admit_joining(&request)?
        } else {
            self.admit_existing(&request, valid.owned.as_ref())?
        };

        let topics_changed = self.refresh_topics(topics);
        let update = MemberUpdate {
            rack_id: request.rack_id,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            names: request.subscribed_topic_names,
            regex: valid.regex,
            assignor: valid.assignor,
            client_id: request.client_id,
            client_host: request.client_host,
        };
        let subscription_changed = self.update_member(&member_id, update, topics, now_ms);
        let mut bump = is_new || subscription_changed;
        if topics_changed || bump {
            bump |= self.refresh_subscribed_metadata(topics);
        }
        if bump {
            self.bump_group_epoch();
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target();
        }

        let empty = PartitionSet::new();
        let member = self.members.get_mut(&member_id).expect("admitted above");
        let reconciliation = Reconciliation {
            target: self.target.get(&member_id).unwrap_or(&empty),
            target_epoch: self.assignment_epoch,
            owned: valid.owned.as_ref(),
            now_ms,
        };
        let assignment_changed = reconciliation.run(member, &mut self.owners);
        let send_assignment = joining || full_request || assignment_changed;
        Ok(HeartbeatResponse {
            error_code: NONE,
            error_message: None,
            member_id: Some(member_id),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignment: send_assignment.then(|| topic_partitions(&member.assigned)),
        })
    }

    /// Epoch -1 removes the member; -2 (static members) keeps it, with its partitions and
    /// instance id, until it rejoins or its session times out.
    fn leave(&mut self, request: &HeartbeatRequest) -> Result<HeartbeatResponse, HeartbeatError> {
        let member_id = match &request.instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => return Err(HeartbeatError::UnknownMemberId),
                Some(id) if *id != request.member_id => {
                    return Err(HeartbeatError::FencedInstanceId)
                }
                Some(id) => id.clone(),
            },
            None if self.members.contains_key(&request.member_id) => request.member_id.clone(),
            None => return Err(HeartbeatError::UnknownMemberId),
        };
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            let member = self.members.get_mut(&member_id).expect("static member");
            // A static member leaving for a while has closed its consumer: what it had to
            // revoke is free, what it was assigned waits for it.
            let pending = mem::take(&mut member.pending_revocation);
            release(&mut self.owners, &member_id, &pending);
            member.revocation_deadline_ms = None;
            member.state = MemberState::Stable;
            member.set_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH);
        } else {
            self.remove_member(&member_id);
        }
        Ok(HeartbeatResponse {
            member_id: Some(member_id),
            member_epoch: request.member_epoch,
            ..HeartbeatResponse::default()
        })
    }

    /// A heartbeat with epoch 0: a new member, a member rejoining (a retried join, or after
    /// FENCED_MEMBER_EPOCH), or a static member replacing its own earlier incarnation.
    fn admit_joining(&mut self, request: &HeartbeatRequest) -> Result<Admitted, HeartbeatError> {
        let member_id = if request.member_id.is_empty() {
            uuid::Uuid::new_v4().simple().to_string()
        } else {
            request.member_id.clone()
        };
        if let Some(instance) = &request.instance_id {
            match self.static_members.get(instance).cloned() {
                Some(holder) if holder == member_id => {}
                Some(holder) => {
                    let released = self
                        .members
                        .get(&holder)
                        .is_some_and(|m| m.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH);
                    if !released {
                        return Err(HeartbeatError::UnreleasedInstanceId);
                    }
                    if self.members.contains_key(&member_id) {
                        return Err(HeartbeatError::InvalidRequest(
                            "MemberId belongs to another member.",
                        ));
                    }
                    self.replace_static_member(&holder, &member_id);
                    return Ok(Admitted {
                        member_id,
                        is_new: false,
                    });
                }
                None if self.members.contains_key(&member_id) => {
                    return Err(HeartbeatError::InvalidRequest(
                        "A member cannot change its InstanceId.",
                    ));
                }
                None => {}
            }
        }
        if let Some(member) = self.members.get_mut(&member_id) {
            if member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                member.set_epoch(JOIN_GROUP_MEMBER_EPOCH);
            }
            return Ok(Admitted {
                member_id,
                is_new: false,
            });
        }
        if self.members.len() >= self.config.group_size_max {
            return Err(HeartbeatError::GroupMaxSizeReached);
        }
        if let Some(instance) = &request.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        let member = Member::new(member_id.clone(), request.instance_id.clone());
        self.members.insert(member_id.clone(), member);
        Ok(Admitted {
            member_id,
            is_new: true,
        })
    }

    /// A heartbeat with a positive epoch: the member must exist and send its current epoch,
    /// or its previous one when retrying (then owning no more than it is assigned now).
    fn admit_existing(
        &self,
        request: &HeartbeatRequest,
        owned: Option<&PartitionSet>,
    ) -> Result<Admitted, HeartbeatError> {
        if let Some(instance) = &request.instance_id {
            match self.static_members.get(instance) {
                None => return Err(HeartbeatError::UnknownMemberId),
                Some(id) if *id != request.member_id => {
                    return Err(HeartbeatError::FencedInstanceId)
                }
                Some(_) => {}
            }
        }
        let member = self
            .members
            .get(&request.member_id)
            .ok_or(HeartbeatError::UnknownMemberId)?;
        let received = request.member_epoch;
        let retried = received < member.member_epoch
            && received == member.previous_member_epoch
            && owned.is_some_and(|o| o.is_subset(&member.assigned));
        if received != member.member_epoch && !retried {
            return Err(HeartbeatError::FencedMemberEpoch);
        }
        Ok(Admitted {
            member_id: request.member_id.clone(),
            is_new: false,
        })
    }

    /// Hands a static member that left (epoch -2) to its new incarnation `new_id`, with its
    /// assignment and target; the group epoch does not move.
    fn replace_static_member(&mut self, old_id: &str, new_id: &str) {
        let mut member = self.members.remove(old_id).expect("static member");
        let pending = mem::take(&mut member.pending_revocation);
        release(&mut self.owners, old_id, &pending);
        for p in &member.assigned {
            let owner = self
                .owners
                .get_mut(p)
                .expect("assigned partitions are owned");
            assert_eq!(owner, old_id, "{p:?} owned by another member");
            *owner = new_id.to_owned();
        }
        member.member_id = new_id.to_owned();
        member.state = MemberState::Stable;
        member.revocation_deadline_ms = None;
        member.set_epoch(JOIN_GROUP_MEMBER_EPOCH);
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), new_id.to_owned());
        }
        if let Some(target) = self.target.remove(old_id) {
            self.target.insert(new_id.to_owned(), target);
        }
        self.members.insert(new_id.to_owned(), member);
    }

    /// Applies a heartbeat's fields to its member; true when its subscription or assignor
    /// changed.
    fn update_member(
        &mut self,
        member_id: &str,
        update: MemberUpdate,
        topics: &TopicsView,
        now_ms: i64,
    ) -> bool {
        let member = self.members.get_mut(member_id).expect("admitted member");
        member.session_deadline_ms = deadline_ms(now_ms, self.config.session_timeout_ms);
        member.client_id = update.client_id;
        member.client_host = update.client_host;
        if update.rack_id.is_some() {
            member.rack_id = update.rack_id;
        }
        if update.rebalance_timeout_ms >= 0 {
            member.rebalance_timeout_ms = update.rebalance_timeout_ms;
        }
        let mut changed = false;
        if let Some(names) = update.names {
            let names: BTreeSet<String> = names.into_iter().collect();
            changed |= names != member.subscribed_topic_names;
            member.subscribed_topic_names = names;
        }
        if let Some(regex) = update.regex {
            let source = |r: &Option<TopicRegex>| r.as_ref().map(|r| r.source().to_owned());
            changed |= source(&regex) != source(&member.subscribed_topic_regex);
            member.subscribed_topic_regex = regex;
        }
        if let Some(assignor) = update.assignor {
            changed |= member.server_assignor != Some(assignor);
            member.server_assignor = Some(assignor);
        }
        if changed {
            member.resolved_topics = resolve(member, topics, &mut HashMap::new());
        }
        changed
    }

    /// Re-resolves every member's subscription when the topics view changed; true if it did.
    fn refresh_topics(&mut self, topics: &TopicsView) -> bool {
        let mut hasher = DefaultHasher::new();
        topics.hash(&mut hasher);
        let fingerprint = hasher.finish();
        if self.topics_fingerprint == Some(fingerprint) {
            return false;
        }
        self.topics_fingerprint = Some(fingerprint);
        let mut regex_matches = HashMap::new();
        for member in self.members.values_mut() {
            member.resolved_topics = resolve(member, topics, &mut regex_matches);
        }
        true
    }

    /// Recomputes the metadata of the resolved topics; true if it changed.
    fn refresh_subscribed_metadata(&mut self, topics: &TopicsView) -> bool {
        let metadata: TopicsView = self
            .members
            .values()
            .flat_map(|m| &m.resolved_topics)
            .filter_map(|name| Some((name.clone(), *topics.get(name)?)))
            .collect();
        let changed = metadata != self.subscribed_metadata;
        self.subscribed_metadata = metadata;
        changed
    }

    fn bump_group_epoch(&mut self) {
        self.group_epoch = self
            .group_epoch
            .checked_add(1)
            .expect("group epoch overflow");
    }

    fn compute_target(&mut self) {
        let subscriptions: Vec<Subscription<'_>> = self
            .members
            .values()
            .map(|m| Subscription {
                member_id: &m.member_id,
                topics: &m.resolved_topics,
            })
            .collect();
        let target = assign(
            self.assignor(),
            &subscriptions,
            &self.target,
            &self.subscribed_metadata,
        );
        self.target = target;
        self.assignment_epoch = self.group_epoch;
    }

    /// Removes a member (left, or timed out): its partitions are free, the group epoch moves.
    fn remove_member(&mut self, member_id: &str) {
        let member = self.members.remove(member_id).expect("member to remove");
        release(&mut self.owners, member_id, &member.assigned);
        release(&mut self.owners, member_id, &member.pending_revocation);
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.target.remove(member_id);
        let members = &self.members;
        self.subscribed_metadata
            .retain(|name, _| members.values().any(|m| m.resolved_topics.contains(name)));
        self.bump_group_epoch();
    }

    fn debug_check(&self) {
        debug_assert_eq!(self.check_invariants(), Ok(()), "group {}", self.group_id);
    }

    /// The module's invariants; `Err` names the first one broken.
    fn check_invariants(&self) -> Result<(), String> {
        if !(0 <= self.assignment_epoch && self.assignment_epoch <= self.group_epoch) {
            return Err(format!(
                "assignment epoch {} vs group epoch {}",
                self.assignment_epoch, self.group_epoch
            ));
        }
        let mut held = 0;
        for (id, m) in &self.members {
            self.check_member(id, m)?;
            held += m.assigned.len() + m.pending_revocation.len();
        }
        if held != self.owners.len() {
            return Err(format!(
                "{} partitions owned, {held} held",
                self.owners.len()
            ));
        }
        for (instance, id) in &self.static_members {
            let mapped = self.members.get(id).and_then(|m| m.instance_id.as_ref());
            if mapped != Some(instance) {
                return Err(format!("instance {instance} maps to {id}, not its member"));
            }
        }
        let mut targeted = PartitionSet::new();
        for (id, target) in &self.target {
            if !self.members.contains_key(id) {
                return Err(format!("target for {id}, not a member"));
            }
            if let Some(p) = target.iter().find(|p| !targeted.insert(**p)) {
                return Err(format!("{p:?} in two targets"));
            }
        }
        Ok(())
    }

    fn check_member(&self, id: &str, m: &Member) -> Result<(), String> {
        if m.member_id != id {
            return Err(format!("member {} filed as {id}", m.member_id));
        }
        if m.member_epoch > self.assignment_epoch
            || m.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH
        {
            return Err(format!(
                "{id} at epoch {} (assignment epoch {})",
                m.member_epoch, self.assignment_epoch
            ));
        }
        let unrevoked = m.state == MemberState::UnrevokedPartitions;
        if !m.pending_revocation.is_empty() && !unrevoked {
            return Err(format!(
                "{id} has partitions pending revocation in {:?}",
                m.state
            ));
        }
        if unrevoked != m.revocation_deadline_ms.is_some() {
            return Err(format!(
                "{id} in {:?} with deadline {:?}",
                m.state, m.revocation_deadline_ms
            ));
        }
        if m.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH && m.instance_id.is_none() {
            return Err(format!("{id} left temporarily but is not static"));
        }
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) != Some(id) {
                return Err(format!("static member {id} is not mapped"));
            }
        }
        if let Some(p) = m.assigned.intersection(&m.pending_revocation).next() {
            return Err(format!("{id}: {p:?} both assigned and pending revocation"));
        }
        for p in m.assigned.iter().chain(&m.pending_revocation) {
            if self.owners.get(p).map(String::as_str) != Some(id) {
                return Err(format!(
                    "{id} holds {p:?}, owned by {:?}",
                    self.owners.get(p)
                ));
            }
        }
        Ok(())
    }
}

/// Persistence: the group as `__consumer_offsets` records, and back.
impl ConsumerGroup {
    /// Every record describing the group now, one per key (see [`consumer_records`]), in a
    /// deterministic order: 3 (group epoch), 4 (subscribed topics' metadata), 5 per member
    /// (identity and subscription), 7 per member with a target, 6 (assignment epoch), 8 per
    /// member (epochs, state, partitions), members in member id order. Only what the group
    /// is, never when: deadlines are not recorded, so an unchanged group gives the same
    /// bytes, and neither is what the topics derive (resolved subscriptions).
    pub fn to_records(&self) -> Vec<(Bytes, Bytes)> {
        let group_id = || self.group_id.clone();
        let mut records = Vec::with_capacity(3 + 3 * self.members.len());
        let mut push = |key: ConsumerGroupKey, value: ConsumerGroupValue| {
            records.push(consumer_records::encode_record(&key, &value));
        };
        push(
            ConsumerGroupKey::Metadata {
                group_id: group_id(),
            },
            ConsumerGroupValue::Metadata(MetadataValue {
                epoch: self.group_epoch,
            }),
        );
        let topics = self
            .subscribed_metadata
            .iter()
            .map(|(name, &(topic_id, partition_count))| TopicMetadata {
                topic_id,
                topic_name: name.clone(),
                partition_count,
            })
            .collect();
        push(
            ConsumerGroupKey::PartitionMetadata {
                group_id: group_id(),
            },
            ConsumerGroupValue::PartitionMetadata(PartitionMetadataValue { topics }),
        );
        for m in self.members.values() {
            push(
                ConsumerGroupKey::MemberMetadata {
                    group_id: group_id(),
                    member_id: m.member_id.clone(),
                },
                ConsumerGroupValue::MemberMetadata(member_metadata(m)),
            );
        }
        for (member_id, target) in &self.target {
            push(
                ConsumerGroupKey::TargetAssignmentMember {
                    group_id: group_id(),
                    member_id: member_id.clone(),
                },
                ConsumerGroupValue::TargetAssignmentMember(TargetAssignmentMemberValue {
                    topic_partitions: topic_partitions(target),
                }),
            );
        }
        push(
            ConsumerGroupKey::TargetAssignmentMetadata {
                group_id: group_id(),
            },
            ConsumerGroupValue::TargetAssignmentMetadata(TargetAssignmentMetadataValue {
                assignment_epoch: self.assignment_epoch,
            }),
        );
        for m in self.members.values() {
            push(
                ConsumerGroupKey::CurrentMemberAssignment {
                    group_id: group_id(),
                    member_id: m.member_id.clone(),
                },
                ConsumerGroupValue::CurrentMemberAssignment(CurrentMemberAssignmentValue {
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    state: m.state,
                    assigned_partitions: topic_partitions(&m.assigned),
                    partitions_pending_revocation: topic_partitions(&m.pending_revocation),
                }),
            );
        }
        records
    }

    /// Rebuilds group `group_id` from its live records (the latest value of each key, with
    /// keys whose latest record is a tombstone left out; a key repeated here takes its last
    /// value). Records of other groups and keys that are not consumer group records are
    /// skipped. `None` when the group cannot be trusted: no group epoch or assignment epoch
    /// record, a value of this group that does not decode (or names an unknown assignor, an
    /// invalid regex, a negative partition), a member without both its metadata and its
    /// current assignment, or a state that breaks the module's invariants (a partition held
    /// twice, say). The coordinator then starts the group afresh, as before persistence.
    ///
    /// Every member's session restarts at `now_ms`, and a member revoking partitions gets its
    /// whole rebalance timeout again. Subscriptions are resolved against the recorded topic
    /// metadata, which is what they resolved to when written; the next heartbeat re-resolves
    /// them against the topics of its view and bumps the group epoch only if those differ from
    /// the recorded ones (a group recorded without metadata, as Kafka 4.1 writes it, bumps it
    /// once).
    pub fn from_records(
        group_id: impl Into<String>,
        config: ConsumerGroupConfig,
        records: impl IntoIterator<Item = (Bytes, Bytes)>,
        now_ms: i64,
    ) -> Option<ConsumerGroup> {
        let group_id = group_id.into();
        let mut loaded = LoadedRecords::default();
        for (key, value) in records {
            let Some(key) = ConsumerGroupKey::decode(&key) else {
                continue;
            };
            if key.group_id() != group_id {
                continue;
            }
            let value = ConsumerGroupValue::decode(&key, &value)?;
            loaded.apply(&key, value)?;
        }
        let group = loaded.into_group(group_id, config, now_ms)?;
        group.check_invariants().ok()?;
        Some(group)
    }
}

/// A group's live records, by kind, as [`ConsumerGroup::from_records`] collects them.
#[derive(Default)]
struct LoadedRecords {
    group_epoch: Option<i32>,
    topics: Vec<TopicMetadata>,
    assignment_epoch: Option<i32>,
    members: BTreeMap<String, MemberMetadataValue>,
    targets: BTreeMap<String, TopicPartitions>,
    current: BTreeMap<String, CurrentMemberAssignmentValue>,
}

impl LoadedRecords {
    /// Files one record; `None` if a per-member record has no member (cannot happen for a
    /// decoded key, but the bytes came from the disk).
    fn apply(&mut self, key: &ConsumerGroupKey, value: ConsumerGroupValue) -> Option<()> {
        let member_id = || key.member_id().map(str::to_owned);
        match value {
            ConsumerGroupValue::Metadata(v) => self.group_epoch = Some(v.epoch),
            ConsumerGroupValue::PartitionMetadata(v) => self.topics = v.topics,
            ConsumerGroupValue::TargetAssignmentMetadata(v) => {
                self.assignment_epoch = Some(v.assignment_epoch);
            }
            ConsumerGroupValue::MemberMetadata(v) => {
                self.members.insert(member_id()?, v);
            }
            ConsumerGroupValue::TargetAssignmentMember(v) => {
                self.targets.insert(member_id()?, v.topic_partitions);
            }
            ConsumerGroupValue::CurrentMemberAssignment(v) => {
                self.current.insert(member_id()?, v);
            }
        }
        Some(())
    }

    fn into_group(
        mut self,
        group_id: String,
        config: ConsumerGroupConfig,
        now_ms: i64,
    ) -> Option<ConsumerGroup> {
        let session_deadline_ms = deadline_ms(now_ms, config.session_timeout_ms);
        let mut group = ConsumerGroup::new(group_id, config);
        // An epoch that cannot grow any more (never written by a group that bumps by one per
        // change) is refused rather than panicking on the next bump.
        group.group_epoch = self.group_epoch.filter(|&e| e < i32::MAX)?;
        group.assignment_epoch = self.assignment_epoch?;
        group.subscribed_metadata = self
            .topics
            .into_iter()
            .map(|t| (t.topic_name, (t.topic_id, t.partition_count)))
            .collect();
        if !self.current.keys().eq(self.members.keys()) {
            return None;
        }
        let mut regex_matches = HashMap::new();
        for (member_id, metadata) in self.members {
            let current = self.current.remove(&member_id)?;
            let mut member = restore_member(member_id, metadata, current)?;
            member.session_deadline_ms = session_deadline_ms;
            member.revocation_deadline_ms = (member.state == MemberState::UnrevokedPartitions)
                .then(|| deadline_ms(now_ms, member.rebalance_timeout_ms));
            member.resolved_topics =
                resolve(&member, &group.subscribed_metadata, &mut regex_matches);
            for p in member.assigned.iter().chain(&member.pending_revocation) {
                if group.owners.insert(*p, member.member_id.clone()).is_some() {
                    return None;
                }
            }
            if let Some(instance) = &member.instance_id {
                let previous = group
                    .static_members
                    .insert(instance.clone(), member.member_id.clone());
                if previous.is_some() {
                    return None;
                }
            }
            group.members.insert(member.member_id.clone(), member);
        }
        for (member_id, target) in self.targets {
            group
                .target
                .insert(member_id, checked_partition_set(&target)?);
        }
        Some(group)
    }
}

/// A member's `ConsumerGroupMemberMetadataValue`.
fn member_metadata(m: &Member) -> MemberMetadataValue {
    MemberMetadataValue {
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
        subscribed_topic_regex: m
            .subscribed_topic_regex
            .as_ref()
            .map(|r| r.source().to_owned()),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        server_assignor: m.server_assignor.map(|a| a.name().to_owned()),
    }
}

/// A member from its two records, without deadlines or resolved topics; `None` if the
/// records hold what no member can (see [`ConsumerGroup::from_records`]).
fn restore_member(
    member_id: String,
    metadata: MemberMetadataValue,
    current: CurrentMemberAssignmentValue,
) -> Option<Member> {
    // A member that left for good (-1) is not recorded; -2 is a static member away.
    if current.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
        return None;
    }
    let subscribed_topic_regex = match metadata.subscribed_topic_regex.as_deref() {
        None | Some("") => None,
        Some(source) => Some(TopicRegex::new(source).ok()?),
    };
    let server_assignor = match metadata.server_assignor.as_deref() {
        None => None,
        Some(name) => Some(Assignor::from_name(name)?),
    };
    let mut member = Member::new(member_id, metadata.instance_id);
    member.rack_id = metadata.rack_id;
    member.client_id = metadata.client_id;
    member.client_host = metadata.client_host;
    member.rebalance_timeout_ms = metadata.rebalance_timeout_ms;
    member.subscribed_topic_names = metadata.subscribed_topic_names.into_iter().collect();
    member.subscribed_topic_regex = subscribed_topic_regex;
    member.server_assignor = server_assignor;
    member.state = current.state;
    member.member_epoch = current.member_epoch;
    member.previous_member_epoch = current.previous_member_epoch;
    member.assigned = checked_partition_set(&current.assigned_partitions)?;
    member.pending_revocation = checked_partition_set(&current.partitions_pending_revocation)?;
    Some(member)
}

/// The partitions of a recorded assignment; `None` if one is negative.
fn checked_partition_set(topic_partitions: &TopicPartitions) -> Option<PartitionSet> {
    let all_valid = topic_partitions
        .iter()
        .all(|(_, partitions)| partitions.iter().all(|&p| p >= 0));
    all_valid.then(|| partition_set(topic_partitions))
}

/// Checks what can be checked of a request alone (Kafka's
/// `throwIfConsumerGroupHeartbeatRequestIsInvalid`).
fn validate(request: &HeartbeatRequest) -> Result<Validated, HeartbeatError> {
    use HeartbeatError::InvalidRequest;
    let epoch = request.member_epoch;
    if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        return Err(InvalidRequest("MemberEpoch is invalid."));
    }
    if request.member_id.is_empty() && epoch != JOIN_GROUP_MEMBER_EPOCH {
        return Err(InvalidRequest("MemberId can't be empty."));
    }
    if request.member_id.len() > ID_BYTES_MAX {
        return Err(InvalidRequest("MemberId is too long."));
    }
    for (id, what) in [
        (
            &request.instance_id,
            "InstanceId can't be empty or too long.",
        ),
        (&request.rack_id, "RackId can't be empty or too long."),
    ] {
        if id
            .as_ref()
            .is_some_and(|id| id.is_empty() || id.len() > ID_BYTES_MAX)
        {
            return Err(InvalidRequest(what));
        }
    }
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH && request.instance_id.is_none() {
        return Err(InvalidRequest(
            "InstanceId can't be null when MemberEpoch is -2.",
        ));
    }
    if request.rebalance_timeout_ms < -1 {
        return Err(InvalidRequest("RebalanceTimeoutMs is invalid."));
    }
    if epoch == JOIN_GROUP_MEMBER_EPOCH {
        if request.rebalance_timeout_ms == -1 {
            return Err(InvalidRequest(
                "RebalanceTimeoutMs must be provided in first request.",
            ));
        }
        if !request.owned_partitions.as_ref().is_some_and(Vec::is_empty) {
            return Err(InvalidRequest(
                "TopicPartitions must be empty when (re-)joining.",
            ));
        }
        if request.subscribed_topic_names.is_none() && request.subscribed_topic_regex.is_none() {
            return Err(InvalidRequest(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            ));
        }
    }
    if request
        .subscribed_topic_names
        .as_ref()
        .is_some_and(|names| names.len() > SUBSCRIBED_TOPICS_MAX)
    {
        return Err(InvalidRequest("SubscribedTopicNames has too many topics."));
    }
    let assignor = match &request.server_assignor {
        None => None,
        Some(name) => Some(Assignor::from_name(name).ok_or(HeartbeatError::UnsupportedAssignor)?),
    };
    let regex = match request.subscribed_topic_regex.as_deref() {
        None => None,
        Some("") => Some(None),
        Some(source) => Some(Some(
            TopicRegex::new(source).map_err(HeartbeatError::InvalidRegularExpression)?,
        )),
    };
    Ok(Validated {
        regex,
        assignor,
        owned: request.owned_partitions.as_ref().map(partition_set),
    })
}

/// The existing topics `member` subscribes to, by name or by regex. `regex_matches` caches
/// the matches of each regex source over `topics`.
fn resolve(
    member: &Member,
    topics: &TopicsView,
    regex_matches: &mut HashMap<String, Vec<String>>,
) -> BTreeSet<String> {
    let mut resolved: BTreeSet<String> = member
        .subscribed_topic_names
        .iter()
        .filter(|name| topics.contains_key(*name))
        .cloned()
        .collect();
    if let Some(regex) = &member.subscribed_topic_regex {
        let matches = regex_matches
            .entry(regex.source().to_owned())
            .or_insert_with(|| {
                topics
                    .keys()
                    .filter(|name| !INTERNAL_TOPICS.contains(&name.as_str()))
                    .filter(|name| regex.is_match(name))
                    .cloned()
                    .collect()
            });
        resolved.extend(matches.iter().cloned());
    }
    resolved
}

/// One member's reconciliation towards its target, on its own heartbeat (Kafka's
/// `CurrentAssignmentBuilder`).
struct Reconciliation<'a> {
    target: &'a PartitionSet,
    target_epoch: i32,
    /// The partitions the member says it holds; `None` when it did not say.
    owned: Option<&'a PartitionSet>,
    now_ms: i64,
}

impl Reconciliation<'_> {
    /// Moves `member` as far towards its target as it can go now; true when its assignment
    /// changed.
    fn run(&self, member: &mut Member, owners: &mut Owners) -> bool {
        match member.state {
            MemberState::Stable if member.member_epoch == self.target_epoch => return false,
            MemberState::Stable | MemberState::UnreleasedPartitions => {}
            MemberState::UnrevokedPartitions => {
                if self.still_owns_any(&member.pending_revocation) {
                    return false;
                }
                let revoked = mem::take(&mut member.pending_revocation);
                release(owners, &member.member_id, &revoked);
                member.revocation_deadline_ms = None;
            }
        }
        self.next_assignment(member, owners)
    }

    /// Whether the member may still hold any of `partitions` (it did not say otherwise).
    fn still_owns_any(&self, partitions: &PartitionSet) -> bool {
        self.owned
            .is_none_or(|owned| !owned.is_disjoint(partitions))
    }

    fn next_assignment(&self, member: &mut Member, owners: &mut Owners) -> bool {
        let keep: PartitionSet = member.assigned.intersection(self.target).copied().collect();
        let revoke: PartitionSet = member.assigned.difference(self.target).copied().collect();
        let mut unreleased = false;
        let gain: PartitionSet = self
            .target
            .difference(&member.assigned)
            .filter(|p| {
                let free = !owners.contains_key(*p);
                unreleased |= !free;
                free
            })
            .copied()
            .collect();
        if !revoke.is_empty() && self.still_owns_any(&revoke) {
            // Revoke first; the epoch stays until the member says it let them go.
            member.assigned = keep;
            member.pending_revocation = revoke;
            member.state = MemberState::UnrevokedPartitions;
            member.revocation_deadline_ms =
                Some(deadline_ms(self.now_ms, member.rebalance_timeout_ms));
            return true;
        }
        let changed = !revoke.is_empty() || !gain.is_empty();
        release(owners, &member.member_id, &revoke);
        for p in &gain {
            let previous = owners.insert(*p, member.member_id.clone());
            assert!(
                previous.is_none(),
                "{p:?} handed to {} while owned",
                member.member_id
            );
        }
        member.assigned = keep;
        member.assigned.extend(gain);
        member.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        member.revocation_deadline_ms = None;
        member.set_epoch(self.target_epoch);
        changed
    }
}

fn release(owners: &mut Owners, member_id: &str, partitions: &PartitionSet) {
    for p in partitions {
        let owner = owners.remove(p);
        assert_eq!(
            owner.as_deref(),
            Some(member_id),
            "{p:?} released by a non-owner"
        );
    }
}

fn deadline_ms(now_ms: i64, timeout_ms: i32) -> i64 {
    // At least 1 ms ahead, so a timeout set while applying timeouts is never due at once.
    now_ms.saturating_add(i64::from(timeout_ms.max(1)))
}

fn partition_set(topic_partitions: &TopicPartitions) -> PartitionSet {
    topic_partitions
        .iter()
        .flat_map(|(topic_id, partitions)| {
            partitions.iter().map(|&partition| TopicIdPartition {
                topic_id: *topic_id,
                partition,
            })
        })
        .collect()
}

fn topic_partitions(set: &PartitionSet) -> TopicPartitions {
    let mut out: TopicPartitions = Vec::new();
    for p in set {
        match out.last_mut() {
            Some((topic_id, partitions)) if *topic_id == p.topic_id => partitions.push(p.partition),
            _ => out.push((p.topic_id, vec![p.partition])),
        }
    }
    out
}

/// What an assignor knows of a member.
struct Subscription<'a> {
    member_id: &'a str,
    /// Existing topics only (resolved).
    topics: &'a BTreeSet<String>,
}

/// A subscribed topic with partitions, and its subscribers (indexes into the members, ascending).
struct SubscribedTopic {
    topic_id: TopicId,
    partitions: i32,
    subscribers: Vec<usize>,
}

impl SubscribedTopic {
    fn partition(&self, partition: i32) -> TopicIdPartition {
        TopicIdPartition {
            topic_id: self.topic_id,
            partition,
        }
    }
}

/// The target assignment: every member (in `members`, sorted by id) gets an entry.
fn assign(
    assignor: Assignor,
    members: &[Subscription<'_>],
    previous: &BTreeMap<String, PartitionSet>,
    metadata: &TopicsView,
) -> BTreeMap<String, PartitionSet> {
    let topics = subscribed_topics(members, metadata);
    let assigned = match assignor {
        Assignor::Range => assign_range(members.len(), &topics),
        Assignor::Uniform => assign_uniform(members, previous, &topics),
    };
    members
        .iter()
        .zip(assigned)
        .map(|(m, set)| (m.member_id.to_owned(), set))
        .collect()
}

/// The topics with partitions that some member subscribes to, fewest subscribers first
/// (so the `uniform` assignor places the most constrained partitions first), then by name.
fn subscribed_topics(members: &[Subscription<'_>], metadata: &TopicsView) -> Vec<SubscribedTopic> {
    let mut by_name: BTreeMap<&str, SubscribedTopic> = BTreeMap::new();
    for (i, member) in members.iter().enumerate() {
        for name in member.topics {
            let Some(&(topic_id, partitions)) = metadata.get(name) else {
                continue;
            };
            if partitions > 0 {
                by_name
                    .entry(name)
                    .or_insert_with(|| SubscribedTopic {
                        topic_id,
                        partitions,
                        subscribers: Vec::new(),
                    })
                    .subscribers
                    .push(i);
            }
        }
    }
    let mut topics: Vec<(&str, SubscribedTopic)> = by_name.into_iter().collect();
    topics.sort_by_key(|(name, t)| (t.subscribers.len(), *name));
    topics.into_iter().map(|(_, t)| t).collect()
}

/// Kafka's range assignor, per topic over its subscribers in member id order: the first
/// `partitions % subscribers` get one partition more.
fn assign_range(member_count: usize, topics: &[SubscribedTopic]) -> Vec<PartitionSet> {
    let mut assigned = vec![PartitionSet::new(); member_count];
    for topic in topics {
        let subscribers = topic.subscribers.len() as i32;
        let (quota, extra) = (
            topic.partitions / subscribers,
            topic.partitions % subscribers,
        );
        let mut next = 0;
        for (rank, &i) in topic.subscribers.iter().enumerate() {
            let count = quota + i32::from((rank as i32) < extra);
            assigned[i].extend((next..next + count).map(|p| topic.partition(p)));
            next += count;
        }
    }
    assigned
}

/// The uniform assignor: (1) every member keeps what it had that it still may have;
/// (2) each unassigned partition goes to its least loaded subscriber; (3) while a subscriber
/// of a topic holds two partitions more than another subscriber, it hands one over. With the
/// same subscriptions everywhere, counts end up differing by at most one, and only partitions
/// that must move for that do move. Deterministic: ties go to the lower member id.
fn assign_uniform(
    members: &[Subscription<'_>],
    previous: &BTreeMap<String, PartitionSet>,
    topics: &[SubscribedTopic],
) -> Vec<PartitionSet> {
    let mut assigned = vec![PartitionSet::new(); members.len()];
    let mut taken = PartitionSet::new();
    let by_id: BTreeMap<TopicId, &SubscribedTopic> =
        topics.iter().map(|t| (t.topic_id, t)).collect();
    for (i, member) in members.iter().enumerate() {
        for p in previous.get(member.member_id).into_iter().flatten() {
            let Some(topic) = by_id.get(&p.topic_id) else {
                continue;
            };
            let valid =
                p.partition < topic.partitions && topic.subscribers.binary_search(&i).is_ok();
            if valid && taken.insert(*p) {
                assigned[i].insert(*p);
            }
        }
    }
    for topic in topics {
        for partition in 0..topic.partitions {
            let p = topic.partition(partition);
            if taken.insert(p) {
                let to = least_loaded(&topic.subscribers, &assigned);
                assigned[to].insert(p);
            }
        }
    }
    // Each move lowers the sum of squared counts, so this ends.
    loop {
        let mut moved = false;
        for topic in topics {
            while let Some((from, to)) = unbalanced_pair(topic, &assigned) {
                let p = *assigned[from]
                    .range(topic.partition(i32::MIN)..=topic.partition(i32::MAX))
                    .next_back()
                    .expect("holds a partition of the topic");
                assigned[from].remove(&p);
                assigned[to].insert(p);
                moved = true;
            }
        }
        if !moved {
            return assigned;
        }
    }
}

fn least_loaded(subscribers: &[usize], assigned: &[PartitionSet]) -> usize {
    *subscribers
        .iter()
        .min_by_key(|&&i| (assigned[i].len(), i))
        .expect("a subscribed topic has subscribers")
}

/// A subscriber of `topic` holding one of its partitions and two partitions more than the
/// least loaded subscriber, and that subscriber.
fn unbalanced_pair(topic: &SubscribedTopic, assigned: &[PartitionSet]) -> Option<(usize, usize)> {
    let to = least_loaded(&topic.subscribers, assigned);
    let holds = |i: usize| {
        assigned[i]
            .range(topic.partition(i32::MIN)..=topic.partition(i32::MAX))
            .next()
            .is_some()
    };
    let from = topic
        .subscribers
        .iter()
        .copied()
        .filter(|&i| holds(i))
        .max_by_key(|&i| (assigned[i].len(), Reverse(i)))?;
    (assigned[from].len() > assigned[to].len() + 1).then_some((from, to))
}

/// A small RE2-style matcher for subscribed topic regexes (keel-broker does not depend on the
/// `regex` crate): literals, `.`, classes (`[a-z_]`, `[^.]`, `\d \w \s` and their negations),
/// groups (`(..)`, `(?:..)`), alternation, `* + ?` (lazy forms too) and `{m}`, `{m,}`,
/// `{m,n}`. A whole topic name must match. Compiled to a Pike VM program, so matching takes
/// time linear in the topic name times the (bounded) program size, whatever the pattern.
pub mod topic_regex {
    use std::mem;

    /// Longest pattern accepted, in bytes.
    pub const PATTERN_BYTES_MAX: usize = 1024;
    /// Largest compiled program; bounds matching time per topic name.
    const PROGRAM_INSTS_MAX: usize = 4096;
    const GROUP_DEPTH_MAX: usize = 64;
    /// RE2's bound on counted repetition.
    const REPEAT_COUNT_MAX: u32 = 1000;

    #[derive(Clone, Debug)]
    pub struct TopicRegex {
        source: String,
        program: Vec<Inst>,
    }

    #[derive(Clone, Debug)]
    enum Inst {
        Char(char),
        /// Any character but a newline, as RE2's `.`.
        Any,
        Class(CharClass),
        Split(usize, usize),
        Jmp(usize),
        /// `^`: goes on only at the start of the name (zero-width).
        AssertStart,
        /// `$`: goes on only at the end of the name (zero-width).
        AssertEnd,
        Match,
    }

    #[derive(Clone, Debug)]
    struct CharClass {
        negated: bool,
        /// Inclusive ranges.
        ranges: Vec<(char, char)>,
    }

    impl CharClass {
        fn matches(&self, c: char) -> bool {
            self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
        }
    }

    enum Node {
        Char(char),
        Any,
        /// `^` and `$`: zero-width assertions.
        Start,
        End,
        Class(CharClass),
        Concatenation(Vec<Node>),
        Alternation(Vec<Node>),
        Repeat {
            node: Box<Node>,
            min: u32,
            max: Option<u32>,
        },
    }

    impl Node {
        /// Whether the node matches only the empty string (compiles to nothing).
        fn is_empty(&self) -> bool {
            match self {
                Node::Char(_) | Node::Any | Node::Class(_) => false,
                Node::Start | Node::End => true,
                Node::Concatenation(nodes) | Node::Alternation(nodes) => {
                    nodes.iter().all(Node::is_empty)
                }
                Node::Repeat { node, .. } => node.is_empty(),
            }
        }
    }

    impl TopicRegex {
        pub fn new(source: &str) -> Result<TopicRegex, String> {
            if source.len() > PATTERN_BYTES_MAX {
                return Err(format!("longer than {PATTERN_BYTES_MAX} bytes"));
            }
            let mut parser = Parser {
                chars: source.chars().collect(),
                pos: 0,
                depth: 0,
            };
            let node = parser.alternation()?;
            if parser.pos < parser.chars.len() {
                return Err(format!("unexpected ')' at {}", parser.pos));
            }
            let mut program = Vec::new();
            compile(&node, &mut program)?;
            push(&mut program, Inst::Match)?;
            Ok(TopicRegex {
                source: source.to_owned(),
                program,
            })
        }

        pub fn source(&self) -> &str {
            &self.source
        }

        /// Whether all of `text` matches.
        pub fn is_match(&self, text: &str) -> bool {
            let n = self.program.len();
            let mut current = Vec::with_capacity(n);
            let mut next = Vec::with_capacity(n);
            let mut marks = vec![usize::MAX; n];
            let mut stack = Vec::new();
            let mut generation = 0;
            let len = text.chars().count();
            let at = |i: usize| Position {
                start: i == 0,
                end: i == len,
            };
            self.add_thread(&mut current, &mut marks, &mut stack, 0, generation, at(0));
            for (i, c) in text.chars().enumerate() {
                if current.is_empty() {
                    return false;
                }
                generation += 1;
                next.clear();
                for &pc in &current {
                    let advances = match &self.program[pc] {
                        Inst::Char(x) => *x == c,
                        Inst::Any => c != '\n',
                        Inst::Class(class) => class.matches(c),
                        _ => false,
                    };
                    if advances {
                        let position = at(i + 1);
                        self.add_thread(
                            &mut next,
                            &mut marks,
                            &mut stack,
                            pc + 1,
                            generation,
                            position,
                        );
                    }
                }
                mem::swap(&mut current, &mut next);
            }
            current
                .iter()
                .any(|&pc| matches!(self.program[pc], Inst::Match))
        }

        /// Adds `pc` and what it reaches without consuming input, once per generation.
        fn add_thread(
            &self,
            list: &mut Vec<usize>,
            marks: &mut [usize],
            stack: &mut Vec<usize>,
            pc: usize,
            generation: usize,
            position: Position,
        ) {
            stack.push(pc);
            while let Some(pc) = stack.pop() {
                if marks[pc] == generation {
                    continue;
                }
                marks[pc] = generation;
                match self.program[pc] {
                    Inst::Jmp(to) => stack.push(to),
                    Inst::AssertStart if position.start => stack.push(pc + 1),
                    Inst::AssertEnd if position.end => stack.push(pc + 1),
                    Inst::AssertStart | Inst::AssertEnd => {}
                    Inst::Split(first, second) => {
                        stack.push(second);
                        stack.push(first);
                    }
                    _ => list.push(pc),
                }
            }
        }
    }

    /// Where in the name a thread is, for the zero-width assertions.
    #[derive(Clone, Copy)]
    struct Position {
        start: bool,
        end: bool,
    }

    struct Parser {
        chars: Vec<char>,
        pos: usize,
        depth: usize,
    }

    enum Escaped {
        Char(char),
        Class(CharClass),
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.pos).copied()
        }

        fn eat(&mut self, c: char) -> bool {
            let found = self.peek() == Some(c);
            self.pos += usize::from(found);
            found
        }

        fn alternation(&mut self) -> Result<Node, String> {
            let mut branches = vec![self.concatenation()?];
            while self.eat('|') {
                branches.push(self.concatenation()?);
            }
            Ok(if branches.len() == 1 {
                branches.swap_remove(0)
            } else {
                Node::Alternation(branches)
            })
        }

        fn concatenation(&mut self) -> Result<Node, String> {
            let mut items = Vec::new();
            while let Some(c) = self.peek() {
                if c == '|' || c == ')' {
                    break;
                }
                if let Some(item) = self.repetition()? {
                    items.push(item);
                }
            }
            Ok(Node::Concatenation(items))
        }

        /// An atom and its quantifier.
        fn repetition(&mut self) -> Result<Option<Node>, String> {
            let atom = self.atom()?;
            if matches!(atom, Node::Start | Node::End) {
                if matches!(self.peek(), Some('*' | '+' | '?')) {
                    return Err("missing argument to repetition operator".into());
                }
                return Ok(Some(atom));
            }
            let simple = match self.peek() {
                Some('*') => Some((0, None)),
                Some('+') => Some((1, None)),
                Some('?') => Some((0, Some(1))),
                _ => None,
            };
            let (min, max) = match simple {
                Some(bounds) => {
                    self.pos += 1;
                    bounds
                }
                None if self.peek() == Some('{') => match self.counted()? {
                    Some(bounds) => bounds,
                    None => return Ok(Some(atom)),
                },
                None => return Ok(Some(atom)),
            };
            self.eat('?'); // lazy: matches the same strings
            if matches!(self.peek(), Some('*' | '+' | '?')) {
                return Err("bad repetition operator".into());
            }
            Ok(Some(Node::Repeat {
                node: Box::new(atom),
                min,
                max,
            }))
        }

        /// `{m}`, `{m,}` or `{m,n}` at `pos`, consumed; `None` (nothing consumed) when the
        /// brace is a literal, as in RE2.
        fn counted(&mut self) -> Result<Option<(u32, Option<u32>)>, String> {
            let rest: String = self.chars[self.pos..].iter().collect();
            let Some(end) = rest.find('}') else {
                return Ok(None);
            };
            let inner = &rest[1..end];
            let number = |s: &str| -> Option<u32> {
                (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| s.parse().ok())
                    .flatten()
            };
            let bounds = match inner.split_once(',') {
                None => number(inner).map(|m| (m, Some(m))),
                Some((m, "")) => number(m).map(|m| (m, None)),
                Some((m, n)) => number(m).zip(number(n)).map(|(m, n)| (m, Some(n))),
            };
            let Some((min, max)) = bounds else {
                return Ok(None);
            };
            if min > REPEAT_COUNT_MAX || max.is_some_and(|max| max > REPEAT_COUNT_MAX || max < min)
            {
                return Err(format!("bad repetition {{{inner}}}"));
            }
            self.pos += rest[..=end].chars().count();
            Ok(Some((min, max)))
        }

        /// One atom (`^` and `$` anywhere are zero-width assertions, as in RE2).
        fn atom(&mut self) -> Result<Node, String> {
            let c = self.peek().ok_or("unexpected end")?;
            self.pos += 1;
            let node = match c {
                '(' => self.group()?,
                '[' => Node::Class(self.class()?),
                '.' => Node::Any,
                '^' => Node::Start,
                '$' => Node::End,
                '*' | '+' | '?' => return Err("missing argument to repetition operator".into()),
                '\\' => match self.escape()? {
                    Escaped::Char(c) => Node::Char(c),
                    Escaped::Class(class) => Node::Class(class),
                },
                c => Node::Char(c),
            };
            Ok(node)
        }

        fn group(&mut self) -> Result<Node, String> {
            if self.depth >= GROUP_DEPTH_MAX {
                return Err("groups nested too deep".into());
            }
            if self.eat('?') && !self.eat(':') {
                return Err("group flags are not supported".into());
            }
            self.depth += 1;
            let inner = self.alternation()?;
            self.depth -= 1;
            if !self.eat(')') {
                return Err("missing ')'".into());
            }
            Ok(inner)
        }

        /// A bracketed class, after its `[`.
        fn class(&mut self) -> Result<CharClass, String> {
            let negated = self.eat('^');
            let mut ranges = Vec::new();
            let mut first = true;
            loop {
                let c = self.peek().ok_or("missing ']'")?;
                self.pos += 1;
                if c == ']' && !first {
                    return Ok(CharClass { negated, ranges });
                }
                first = false;
                let lo = match self.class_char(c)? {
                    Escaped::Char(lo) => lo,
                    Escaped::Class(class) if !class.negated => {
                        ranges.extend(class.ranges);
                        continue;
                    }
                    Escaped::Class(_) => return Err("negated escape in a class".into()),
                };
                let is_range = self.peek() == Some('-')
                    && self.chars.get(self.pos + 1).is_some_and(|&n| n != ']');
                if !is_range {
                    ranges.push((lo, lo));
                    continue;
                }
                self.pos += 1;
                let c = self.peek().ok_or("missing ']'")?;
                self.pos += 1;
                let Escaped::Char(hi) = self.class_char(c)? else {
                    return Err("bad character class range".into());
                };
                if hi < lo {
                    return Err(format!("bad character class range {lo}-{hi}"));
                }
                ranges.push((lo, hi));
            }
        }

        fn class_char(&mut self, c: char) -> Result<Escaped, String> {
            if c == '\\' {
                self.escape()
            } else {
                Ok(Escaped::Char(c))
            }
        }

        /// What follows a backslash.
        fn escape(&mut self) -> Result<Escaped, String> {
            let c = self.peek().ok_or("trailing backslash")?;
            self.pos += 1;
            let class = |negated: bool, ranges: &[(char, char)]| {
                Ok(Escaped::Class(CharClass {
                    negated,
                    ranges: ranges.to_vec(),
                }))
            };
            const DIGIT: &[(char, char)] = &[('0', '9')];
            const WORD: &[(char, char)] = &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')];
            const SPACE: &[(char, char)] = &[('\t', '\n'), ('\x0c', '\r'), (' ', ' ')];
            match c {
                'd' => class(false, DIGIT),
                'D' => class(true, DIGIT),
                'w' => class(false, WORD),
                'W' => class(true, WORD),
                's' => class(false, SPACE),
                'S' => class(true, SPACE),
                'n' => Ok(Escaped::Char('\n')),
                't' => Ok(Escaped::Char('\t')),
                'r' => Ok(Escaped::Char('\r')),
                'f' => Ok(Escaped::Char('\x0c')),
                c if c.is_ascii_punctuation() => Ok(Escaped::Char(c)),
                c => Err(format!("unsupported escape \\{c}")),
            }
        }
    }

    fn push(program: &mut Vec<Inst>, inst: Inst) -> Result<usize, String> {
        if program.len() >= PROGRAM_INSTS_MAX {
            return Err("regular expression too large".into());
        }
        program.push(inst);
        Ok(program.len() - 1)
    }

    fn compile(node: &Node, program: &mut Vec<Inst>) -> Result<(), String> {
        match node {
            Node::Char(c) => drop(push(program, Inst::Char(*c))?),
            Node::Any => drop(push(program, Inst::Any)?),
            Node::Start => drop(push(program, Inst::AssertStart)?),
            Node::End => drop(push(program, Inst::AssertEnd)?),
            Node::Class(class) => drop(push(program, Inst::Class(class.clone()))?),
            Node::Concatenation(nodes) => {
                for node in nodes {
                    compile(node, program)?;
                }
            }
            Node::Alternation(branches) => {
                let (last, rest) = branches.split_last().expect("two branches or more");
                let mut exits = Vec::new();
                for branch in rest {
                    let split = push(program, Inst::Split(0, 0))?;
                    compile(branch, program)?;
                    exits.push(push(program, Inst::Jmp(0))?);
                    program[split] = Inst::Split(split + 1, program.len());
                }
                compile(last, program)?;
                let end = program.len();
                for exit in exits {
                    program[exit] = Inst::Jmp(end);
                }
            }
            // Every copy of a non-empty node adds instructions, so the size bound also bounds
            // the work here.
            Node::Repeat { node, .. } if node.is_empty() => {}
            Node::Repeat { node, min, max } => {
                for _ in 0..*min {
                    compile(node, program)?;
                }
                match max {
                    None => {
                        let split = push(program, Inst::Split(0, 0))?;
                        compile(node, program)?;
                        push(program, Inst::Jmp(split))?;
                        program[split] = Inst::Split(split + 1, program.len());
                    }
                    Some(max) => {
                        for _ in *min..*max {
                            let split = push(program, Inst::Split(0, 0))?;
                            compile(node, program)?;
                            program[split] = Inst::Split(split + 1, program.len());
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::ResponseError;

    const REBALANCE_MS: i32 = 30_000;
    const SESSION_MS: i64 = 45_000;
    const HEARTBEAT_MS: i64 = 5_000;

    fn topic_id(name: &str, incarnation: u8) -> TopicId {
        let mut id = [0u8; 16];
        for (i, b) in name.bytes().take(15).enumerate() {
            id[i] = b;
        }
        id[15] = incarnation;
        id
    }

    fn view(topics: &[(&str, i32)]) -> TopicsView {
        topics
            .iter()
            .map(|&(name, partitions)| (name.to_owned(), (topic_id(name, 0), partitions)))
            .collect()
    }

    fn tp(topic: &str, partition: i32) -> TopicIdPartition {
        TopicIdPartition {
            topic_id: topic_id(topic, 0),
            partition,
        }
    }

    fn set(topic: &str, partitions: &[i32]) -> PartitionSet {
        partitions.iter().map(|&p| tp(topic, p)).collect()
    }

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
            if r.error_code != NONE {
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
                    assert_eq!(r.error_code, NONE, "{r:?}");
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
    fn error_codes_are_kafkas() {
        for (ours, kafka) in [
            (UNKNOWN_MEMBER_ID, ResponseError::UnknownMemberId),
            (INVALID_REQUEST, ResponseError::InvalidRequest),
            (GROUP_MAX_SIZE_REACHED, ResponseError::GroupMaxSizeReached),
            (FENCED_INSTANCE_ID, ResponseError::FencedInstanceId),
            (FENCED_MEMBER_EPOCH, ResponseError::FencedMemberEpoch),
            (UNRELEASED_INSTANCE_ID, ResponseError::UnreleasedInstanceId),
            (UNSUPPORTED_ASSIGNOR, ResponseError::UnsupportedAssignor),
            (STALE_MEMBER_EPOCH, ResponseError::StaleMemberEpoch),
            (
                INVALID_REGULAR_EXPRESSION,
                ResponseError::InvalidRegularExpression,
            ),
        ] {
            assert_eq!(ours, kafka.code(), "{kafka:?}");
        }
    }

    #[test]
    fn three_members_join_one_by_one_and_get_two_partitions_each() {
        let mut h = Harness::new(&[("t", 6)]);
        let mut a = Client::new("a", &["t"]);
        let r = h.heartbeat(&mut a);
        assert_eq!((r.error_code, r.member_epoch), (NONE, 1));
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
            (NONE, LEAVE_GROUP_MEMBER_EPOCH)
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
                assert_eq!(h.heartbeat(c).error_code, NONE);
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
            assert_eq!(h.send(stubborn.clone()).error_code, NONE);
            assert_eq!(h.heartbeat(&mut b).error_code, NONE);
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
            (NONE, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
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
        assert_eq!(r.error_code, NONE, "{r:?}");
        assert_eq!(a2.owned, a_owned);
        assert_eq!(r.member_epoch, epoch);
        assert_eq!(h.group.group_epoch(), epoch);
        assert_eq!(h.group.state(), ConsumerGroupState::Stable);
        // The old incarnation is fenced by its instance id.
        assert_eq!(h.heartbeat(&mut clients[0]).error_code, FENCED_INSTANCE_ID);

        // A static member that leaves for good (-1) frees its instance id and partitions.
        let r = h.send(a2.leave_request(LEAVE_GROUP_MEMBER_EPOCH));
        assert_eq!(r.error_code, NONE);
        let mut rest = vec![clients[1].clone()];
        h.settle(&mut rest);
        assert_eq!(rest[0].owned.len(), 6);
        let r = h.heartbeat(&mut Client::new("a3", &["t"]).with_instance("ia"));
        assert_eq!(r.error_code, NONE);
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
        assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
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
        assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
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
        let cases: Vec<(HeartbeatRequest, i16)> = vec![
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
        assert_eq!(r.error_code, NONE);
        assert!(!anonymous.member_id.is_empty());
        assert_eq!(h.heartbeat(&mut Client::new("b", &["t"])).error_code, NONE);
        let r = h.heartbeat(&mut Client::new("c", &["t"]));
        assert_eq!(r.error_code, GROUP_MAX_SIZE_REACHED);
        assert_eq!(h.group.member_count(), 2);
        // A member already in the group may rejoin when it is full.
        anonymous.epoch = 0;
        anonymous.owned.clear();
        assert_eq!(h.heartbeat(&mut anonymous).error_code, NONE);
    }

    #[test]
    fn can_commit_checks_member_and_epoch() {
        let mut h = Harness::new(&[("t", 2)]);
        assert_eq!(
            h.group.can_commit("", -1),
            NONE,
            "an empty group takes admin commits"
        );
        let mut a = Client::new("a", &["t"]);
        h.heartbeat(&mut a);
        assert_eq!(h.group.can_commit("a", a.epoch), NONE);
        assert_eq!(h.group.can_commit("", -1), UNKNOWN_MEMBER_ID);
        assert_eq!(h.group.can_commit("z", a.epoch), UNKNOWN_MEMBER_ID);
        let mut b = Client::new("b", &["t"]);
        h.heartbeat(&mut b);
        h.heartbeat(&mut a);
        h.heartbeat(&mut a);
        assert_eq!(a.epoch, 2);
        assert_eq!(h.group.can_commit("a", 1), STALE_MEMBER_EPOCH);
        assert_eq!(h.group.can_commit("a", 2), NONE);
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
    fn range_assignor_lays_out_consecutive_ranges() {
        let metadata = view(&[("t1", 7), ("t2", 2), ("t3", 3)]);
        let both: BTreeSet<String> = ["t1".to_owned(), "t2".to_owned()].into();
        let t3: BTreeSet<String> = ["t3".to_owned()].into();
        let members = [
            Subscription {
                member_id: "a",
                topics: &both,
            },
            Subscription {
                member_id: "b",
                topics: &both,
            },
            Subscription {
                member_id: "c",
                topics: &both,
            },
            Subscription {
                member_id: "d",
                topics: &t3,
            },
        ];
        let target = assign(Assignor::Range, &members, &BTreeMap::new(), &metadata);
        let mut a = set("t1", &[0, 1, 2]);
        a.extend(set("t2", &[0]));
        let mut b = set("t1", &[3, 4]);
        b.extend(set("t2", &[1]));
        assert_eq!(target["a"], a);
        assert_eq!(target["b"], b);
        assert_eq!(target["c"], set("t1", &[5, 6]));
        assert_eq!(target["d"], set("t3", &[0, 1, 2]));

        // Through the group: the assignor most members ask for.
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

    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn chance(&mut self, percent: usize) -> bool {
            self.below(100) < percent
        }
    }

    fn uniform(
        ids: &[String],
        subscriptions: &[BTreeSet<String>],
        previous: &BTreeMap<String, PartitionSet>,
        metadata: &TopicsView,
    ) -> BTreeMap<String, PartitionSet> {
        let members: Vec<Subscription<'_>> = ids
            .iter()
            .zip(subscriptions)
            .map(|(id, topics)| Subscription {
                member_id: id,
                topics,
            })
            .collect();
        let target = assign(Assignor::Uniform, &members, previous, metadata);
        assert_eq!(
            target,
            assign(Assignor::Uniform, &members, previous, metadata),
            "deterministic"
        );
        target
    }

    /// Every partition of a subscribed topic goes to exactly one of its subscribers.
    fn assert_complete(
        target: &BTreeMap<String, PartitionSet>,
        ids: &[String],
        subscriptions: &[BTreeSet<String>],
        metadata: &TopicsView,
    ) {
        let mut seen = PartitionSet::new();
        for (id, topics) in ids.iter().zip(subscriptions) {
            for p in &target[id] {
                assert!(seen.insert(*p), "{p:?} twice");
                let name = metadata
                    .iter()
                    .find(|(_, (tid, _))| *tid == p.topic_id)
                    .map(|(n, _)| n)
                    .expect("known topic");
                assert!(topics.contains(name), "{id} not subscribed to {name}");
            }
        }
        let expected: usize = metadata
            .iter()
            .filter(|(name, _)| subscriptions.iter().any(|s| s.contains(*name)))
            .map(|(_, (_, n))| *n as usize)
            .sum();
        assert_eq!(seen.len(), expected);
    }

    #[test]
    fn uniform_assignor_is_balanced_and_sticky() {
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let topic_count = 1 + rng.below(4);
            let metadata: TopicsView = (0..topic_count)
                .map(|i| {
                    let name = format!("t{i}");
                    let id = topic_id(&name, 0);
                    (name, (id, rng.below(12) as i32))
                })
                .collect();
            let everything: BTreeSet<String> = metadata.keys().cloned().collect();
            let total: usize = metadata.values().map(|(_, n)| *n as usize).sum();
            let member_count = 1 + rng.below(7);
            let mut ids: Vec<String> = (0..member_count).map(|i| format!("m{i:02}")).collect();
            let mut subs = vec![everything.clone(); member_count];
            let first = uniform(&ids, &subs, &BTreeMap::new(), &metadata);
            assert_complete(&first, &ids, &subs, &metadata);
            let counts: Vec<usize> = first.values().map(BTreeSet::len).collect();
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(max.unwrap() - min.unwrap() <= 1, "seed {seed}: {counts:?}");

            // A member joins: the others only give, and no more than the newcomer needs.
            ids.push("m99".into());
            subs.push(everything.clone());
            let grown = uniform(&ids, &subs, &first, &metadata);
            assert_complete(&grown, &ids, &subs, &metadata);
            for (id, old) in &first {
                assert!(grown[id].is_subset(old), "seed {seed}: {id} only gives");
            }
            assert_eq!(grown["m99"].len(), total / ids.len(), "seed {seed}");
            let counts: Vec<usize> = grown.values().map(BTreeSet::len).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);

            // A member leaves: the others only take.
            let gone = rng.below(ids.len());
            ids.remove(gone);
            subs.remove(gone);
            let shrunk = uniform(&ids, &subs, &grown, &metadata);
            assert_complete(&shrunk, &ids, &subs, &metadata);
            for id in &ids {
                assert!(
                    grown[id].is_subset(&shrunk[id]),
                    "seed {seed}: {id} only takes"
                );
            }
            let counts: Vec<usize> = shrunk.values().map(BTreeSet::len).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn uniform_assignor_balances_mixed_subscriptions_locally() {
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let metadata: TopicsView = (0..1 + rng.below(5))
                .map(|i| {
                    let name = format!("t{i}");
                    let id = topic_id(&name, 0);
                    (name, (id, rng.below(10) as i32))
                })
                .collect();
            let names: Vec<String> = metadata.keys().cloned().collect();
            let ids: Vec<String> = (0..1 + rng.below(6)).map(|i| format!("m{i}")).collect();
            let subs: Vec<BTreeSet<String>> = ids
                .iter()
                .map(|_| names.iter().filter(|_| rng.chance(60)).cloned().collect())
                .collect();
            let mut previous = BTreeMap::new();
            for _ in 0..3 {
                let target = uniform(&ids, &subs, &previous, &metadata);
                assert_complete(&target, &ids, &subs, &metadata);
                for id in &ids {
                    for p in &target[id] {
                        for (other, other_topics) in ids.iter().zip(&subs) {
                            let name = metadata
                                .iter()
                                .find(|(_, (tid, _))| *tid == p.topic_id)
                                .map(|(n, _)| n)
                                .expect("known topic");
                            if other_topics.contains(name) {
                                assert!(
                                    target[id].len() <= target[other].len() + 1,
                                    "seed {seed}: {id} could give {p:?} to {other}"
                                );
                            }
                        }
                    }
                }
                assert_eq!(target, uniform(&ids, &subs, &target, &metadata), "stable");
                previous = target;
            }
        }
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
            "(", ")", "a)", "[a", "*a", "a**", "a{3,2}", "a{1001}", "(?i)a", "^*", "\\q", "[z-a]",
            "x|+", "\\",
        ] {
            assert!(TopicRegex::new(bad).is_err(), "{bad} should be refused");
        }
        assert!(TopicRegex::new(&"a".repeat(topic_regex::PATTERN_BYTES_MAX + 1)).is_err());
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
                consumer_records::record_group(k).as_deref(),
                Some(group.group_id())
            );
            let (key, value) = consumer_records::decode_record(k, v).expect("decodes");
            assert!(keys.insert(key.clone()), "{key:?} twice");
            let again = consumer_records::encode_record(&key, &value);
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
            assert_eq!((r.error_code, r.member_epoch), (NONE, epoch), "{r:?}");
            assert_eq!(r.assignment, None);
        }
        // A client that lost its coordinator sends everything again and hears the same.
        for c in &mut clients {
            let before = c.owned.clone();
            c.send_full = true;
            let r = h.heartbeat(c);
            assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
            assert_eq!(r.assignment.map(|a| partition_set(&a)), Some(before));
        }
        assert_eq!(h.group.group_epoch(), epoch, "no spurious rebalance");
        // One that missed its last epoch bump retries with the previous epoch.
        let mut late = clients[0].clone();
        late.epoch = h.group.members["a"].previous_member_epoch;
        assert!(late.epoch > 0 && late.epoch < epoch);
        let r = h.send(late.request());
        assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));

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
        assert_eq!(r.error_code, NONE);
        h.now_ms += 1_000;
        h.group = restored(&h.group, h.now_ms);
        assert_eq!(
            h.group.members["a"].member_epoch,
            LEAVE_GROUP_STATIC_MEMBER_EPOCH
        );
        let mut again = Client::new("a2", &["t"]).with_instance("ia");
        let r = h.heartbeat(&mut again);
        assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
        assert_eq!(again.owned, a_owned);
        assert_eq!(h.group.group_epoch(), epoch);
        assert_eq!(h.group.static_members["ia"], "a2");
        h.group = restored(&h.group, h.now_ms);
        clients[0] = again;
        for c in &mut clients {
            let r = h.heartbeat(c);
            assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
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
            assert_eq!((r.error_code, r.member_epoch), (NONE, epoch));
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
            consumer_records::decode_record(&records[at].0, &records[at].1).expect("decodes");
        edit(&mut value);
        records[at] = consumer_records::encode_record(&key, &value);
        records
    }

    #[test]
    fn malformed_or_inconsistent_records_are_skipped_or_refused() {
        let mut h = Harness::new(&[("t", 6)]);
        let clients = three_stable_members(&mut h);
        let records = h.group.to_records();
        let config = ConsumerGroupConfig::default();
        let load = |records: Vec<(Bytes, Bytes)>| {
            ConsumerGroup::from_records("g", config.clone(), records, 0)
        };

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
        assert_eq!((r.error_code, r.member_epoch), (NONE, epoch + 1));

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
        stray.push(consumer_records::encode_record(
            &ConsumerGroupKey::TargetAssignmentMember {
                group_id: "g".into(),
                member_id: "gone".into(),
            },
            &ConsumerGroupValue::TargetAssignmentMember(
                consumer_records::TargetAssignmentMemberValue {
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
            let Some(mut group) =
                ConsumerGroup::from_records("g", h.group.config.clone(), records, 0)
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
            NONE => {
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
                        let away =
                            group.members[id].member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH;
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
                        matches!(r.error_code, NONE | UNKNOWN_MEMBER_ID),
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
                    request.member_epoch = server_epoch.unwrap_or(0).max(client.epoch).max(0)
                        + 1
                        + rng.below(3) as i32;
                    group.tick(now_ms);
                    let before = group.describe();
                    let r = group.heartbeat(request, &topics, now_ms);
                    assert_ne!(r.error_code, NONE, "{context}");
                    assert_eq!(before, group.describe(), "{context}");
                }
                _ => {
                    let client = &sims[s].client;
                    let expected = match group.members.get(&client.member_id) {
                        None => UNKNOWN_MEMBER_ID,
                        Some(m) if m.member_epoch != client.epoch => STALE_MEMBER_EPOCH,
                        Some(_) => NONE,
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
                    NONE => {
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
}
