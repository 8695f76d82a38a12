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
//! describes the group as Kafka's `__consumer_offsets` records ([`super::consumer_group_records`]), which
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
//!   resolves them asynchronously); the matcher ([`super::topic_regex`]) is the `regex` crate
//!   (RE2's syntax, as Kafka's RE2/J), anchored so that a topic matches only as a whole, as
//!   RE2/J `matches()`;
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

pub use super::assignor::Assignor;
pub use super::assignor::TopicsView;
use super::assignor::{assign, Subscription};
use super::consumer_group_records;
pub use super::consumer_group_records::{MemberState, TopicPartitions};
use super::topic_regex::TopicRegex;
use bytes::Bytes;
use keel_vocab::error::ResponseError;
use keel_vocab::{ErrorCode, TopicId, TopicIdPartition};

use super::consumer_group_records::{
    ConsumerGroupKey, ConsumerGroupValue, CurrentMemberAssignmentValue, MemberMetadataValue,
    MetadataValue, PartitionMetadataValue, TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue, TopicMetadata,
};

/// Kafka error codes this module answers with (see `kafka_protocol::ResponseError`; a test
/// checks the numbers).
const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode::of(ResponseError::UnknownMemberId);
const INVALID_REQUEST: ErrorCode = ErrorCode::of(ResponseError::InvalidRequest);
const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode::of(ResponseError::GroupMaxSizeReached);
const FENCED_INSTANCE_ID: ErrorCode = ErrorCode::of(ResponseError::FencedInstanceId);
const FENCED_MEMBER_EPOCH: ErrorCode = ErrorCode::of(ResponseError::FencedMemberEpoch);
const UNRELEASED_INSTANCE_ID: ErrorCode = ErrorCode::of(ResponseError::UnreleasedInstanceId);
const UNSUPPORTED_ASSIGNOR: ErrorCode = ErrorCode::of(ResponseError::UnsupportedAssignor);
const STALE_MEMBER_EPOCH: ErrorCode = ErrorCode::of(ResponseError::StaleMemberEpoch);
const INVALID_REGULAR_EXPRESSION: ErrorCode =
    ErrorCode::of(ResponseError::InvalidRegularExpression);

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
    pub error_code: ErrorCode,
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
    pub fn code(&self) -> ErrorCode {
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

    /// Whether `member_id` at `member_epoch` may commit offsets (OffsetCommit v9+): ErrorCode::NONE,
    /// UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH when the epoch is not the member's current one
    /// (as Kafka, a newer epoch is stale too). A negative epoch (admin client, or a consumer
    /// without group management) may commit while the group has no members.
    pub fn can_commit(&self, member_id: &str, member_epoch: i32) -> ErrorCode {
        if member_epoch < 0 && self.members.is_empty() {
            return ErrorCode::NONE;
        }
        match self.members.get(member_id) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.member_epoch != member_epoch => STALE_MEMBER_EPOCH,
            Some(_) => ErrorCode::NONE,
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
            error_code: ErrorCode::NONE,
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
    /// Every record describing the group now, one per key (see [`super::consumer_group_records`]), in a
    /// deterministic order: 3 (group epoch), 4 (subscribed topics' metadata), 5 per member
    /// (identity and subscription), 7 per member with a target, 6 (assignment epoch), 8 per
    /// member (epochs, state, partitions), members in member id order. Only what the group
    /// is, never when: deadlines are not recorded, so an unchanged group gives the same
    /// bytes, and neither is what the topics derive (resolved subscriptions).
    pub fn to_records(&self) -> Vec<(Bytes, Bytes)> {
        let group_id = || self.group_id.clone();
        let mut records = Vec::with_capacity(3 + 3 * self.members.len());
        let mut push = |key: ConsumerGroupKey, value: ConsumerGroupValue| {
            records.push(consumer_group_records::encode_record(&key, &value));
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

#[cfg(test)]
#[path = "consumer_group_tests.rs"]
mod tests;
