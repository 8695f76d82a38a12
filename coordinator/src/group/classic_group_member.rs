//! The members of a classic group: [`Member`], as the group tracks one (Kafka's
//! `ClassicGroupMember`), and the member views that JoinGroup, LeaveGroup and DescribeGroups
//! carry.

use bytes::Bytes;

/// One member as the leader's JoinGroup answer lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// One member of a LeaveGroup: by member id, or (member id empty) by `group.instance.id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// A member as DescribeGroups shows it; metadata and assignment only when `Stable`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A member of a classic group, as the group tracks it (Kafka's `ClassicGroupMember`).
#[derive(Debug)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) group_instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout_ms: i32,
    pub(super) rebalance_timeout_ms: i32,
    /// In order of preference, as the member sent them.
    pub(super) protocols: Vec<(String, Bytes)>,
    /// `None` until the leader's SyncGroup of a generation this member belongs to.
    pub(super) assignment: Option<Bytes>,
    /// A JoinGroup waiting for the rebalance to complete.
    pub(super) join_ticket: Option<Ticket>,
    /// A SyncGroup waiting for the leader's.
    pub(super) sync_ticket: Option<Ticket>,
    /// Joined and not yet answered; such a member may time out while waiting.
    pub(super) is_new: bool,
    /// Removed if not heard from by then, unless it waits for an answer (and is not new).
    pub(super) session_deadline_ms: i64,
}

impl Member {
    pub(super) fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    pub(super) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    /// When the session times out, if it can: a member waiting for an answer is alive by
    /// definition (Kafka's `hasSatisfiedHeartbeat`), unless it joined for the first time.
    pub(super) fn expiry_ms(&self) -> Option<i64> {
        let waiting = self.join_ticket.is_some() || self.sync_ticket.is_some();
        (self.is_new || !waiting).then_some(self.session_deadline_ms)
    }
}

/// Names a waiting request; unique within one group for its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub(super) u64);

impl Ticket {
    /// The number, for keying the coordinator's table of waiting requests.
    pub fn get(self) -> u64 {
        self.0
    }
}
