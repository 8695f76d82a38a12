//! Classic group membership on the coordinator shard: the operations behind JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups and DeleteGroups, the parking
//! of requests that wait for a group's answer, and the per-shard timer that drives the groups'
//! timeouts. The protocol itself is [`ClassicGroup`], a sans-I/O state machine; this file only
//! feeds it requests and time and carries its answers back.
//!
//! Waiting requests: a JoinGroup (until the rebalance completes) or a follower's SyncGroup
//! (until the leader's) waits without blocking any shard. The handler, on the shard of the
//! client's connection, first parks a oneshot there ([`park`]) and sends its token
//! ([`Waiter`]) with the request to the coordinator shard. If the group answers later, the
//! coordinator keeps the waiter under the group's ticket; when a later call into the group
//! yields that ticket, the answer goes back to the waiter's shard (inline, or by a mesh
//! notification) and completes the oneshot. The coordinator never holds a task per waiting
//! request, so waiting requests hold no mesh job slot.
//!
//! Invariants:
//! - after *every* call into a group (any call may answer other members' waiting requests or
//!   change the group's next deadline) the group is settled: its answers are delivered, its
//!   timer re-indexed, and a group left with nothing is forgotten ([`with_group`]);
//! - every ticket a group hands out is in its entry's `waiting` until the group answers it, and
//!   the state machine answers every ticket by the rebalance or sync timeout of its generation;
//!   a group dropped before that (its coordinator partition reloads) answers its waiters
//!   NOT_COORDINATOR, and a shard shutting down answers its own parked requests NOT_COORDINATOR;
//! - if a parked request's future is dropped (its connection closed), [`Parking`]'s drop forgets
//!   the token; the group's answer, when it comes, finds nobody and is dropped.
//!
//! Time: the groups run on a monotonic clock ([`clock_ms`], milliseconds since the process
//! started), so a wall-clock step cannot expire sessions.
//!
//! Bounds: members per group by `group.max.size` (member ids handed out and not yet used too);
//! parked requests per shard by the connections' in-flight request limit. A group left without
//! members, offsets or running timers is forgotten at the next expiry check (as in Kafka); one
//! that never had a classic membership, or was deleted, at once.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use keel_shard::Event;
use tracing::debug;

use super::{write, GroupCoordinator, GroupEntry};
use crate::config::BrokerConfig;
use crate::coordination::parking::join_all;
use crate::shard::BrokerShard;
use keel_coordinator::group::classic_group::{
    ClassicGroup, Completed, GroupConfig, GroupDescription, GroupState, JoinRequest, JoinResponse,
    LeavingMember, Reply, SyncRequest, SyncResponse,
};
use keel_coordinator::group::records::OffsetChange;
use keel_vocab::ErrorCode;

/// The timer task wakes at least this often, even with no deadline pending.
const TIMER_IDLE_MS: i64 = 60_000;

pub use keel_coordinator::group::Waiter;

/// What a parked request receives: the group's answer, or an error for the whole request.
pub type GroupAnswer = Result<Completed, ErrorCode>;

/// The per-group limits from the broker's settings.
pub fn group_config(c: &BrokerConfig) -> GroupConfig {
    GroupConfig {
        group_size_max: c.group_size_max,
        session_timeout_ms_min: c.group_session_timeout_ms_min,
        session_timeout_ms_max: c.group_session_timeout_ms_max,
        initial_rebalance_delay_ms: c.group_initial_rebalance_delay_ms,
    }
}

// ---- parking, on the shard of the client's connection ------------------------------------

/// A request of this shard parked for a group's answer. Dropping it forgets the parking.
pub struct Parking {
    shard: Rc<BrokerShard>,
    token: u64,
    rx: futures_channel::oneshot::Receiver<GroupAnswer>,
}

/// Parks a request on this shard; send [`Parking::waiter`] with it to the coordinator.
pub fn park(shard: &Rc<BrokerShard>) -> Parking {
    let groups = &shard.groups;
    let token = groups.next_park_token.get();
    groups.next_park_token.set(token.wrapping_add(1));
    let (tx, rx) = futures_channel::oneshot::channel();
    groups.parked.borrow_mut().insert(token, tx);
    Parking {
        shard: shard.clone(),
        token,
        rx,
    }
}

impl Parking {
    pub fn waiter(&self) -> Waiter {
        Waiter {
            shard: self.shard.id,
            token: self.token,
        }
    }

    /// Waits for the group's answer; NOT_COORDINATOR if this shard shuts down first (the
    /// client finds the coordinator again and rejoins).
    pub async fn wait(&mut self) -> GroupAnswer {
        let shard = self.shard.clone();
        let rx = &mut self.rx;
        futures_lite::future::or(
            async {
                rx.await
                    .unwrap_or(Err(ErrorCode::of(ResponseError::CoordinatorNotAvailable)))
            },
            async {
                shard.shutdown.wait().await;
                Err(ErrorCode::of(ResponseError::NotCoordinator))
            },
        )
        .await
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        self.shard.groups.parked.borrow_mut().remove(&self.token);
    }
}

/// Hands answers to their parked requests: inline on this shard, by mesh notification to
/// another. A request no longer parked (its connection closed) drops its answer.
pub fn deliver(shard: &BrokerShard, deliveries: Vec<(Waiter, GroupAnswer)>) {
    for (waiter, answer) in deliveries {
        if waiter.shard == shard.id {
            shard.groups.complete_parked(waiter.token, answer);
            continue;
        }
        let mesh = shard.mesh.clone();
        glommio::spawn_local(async move {
            let token = waiter.token;
            let sent = mesh
                .notify(waiter.shard, move |s| {
                    s.groups.complete_parked(token, answer)
                })
                .await;
            if let Err(e) = sent {
                debug!(target_shard = waiter.shard, error = %e, "group answer not delivered");
            }
        })
        .detach();
    }
}

impl GroupCoordinator {
    fn complete_parked(&self, token: u64, answer: GroupAnswer) {
        let sender = self.parked.borrow_mut().remove(&token);
        if let Some(tx) = sender {
            let _ = tx.send(answer);
        }
    }

    /// After a call into group `name`: takes its answers for their waiters, re-indexes its
    /// next deadline (waking the timer task if it moved earlier than the one it sleeps until),
    /// and forgets the group if nothing is left of it. Returns the answers to deliver.
    fn settle(
        &self,
        groups: &mut std::collections::HashMap<String, GroupEntry>,
        name: &str,
    ) -> Vec<(Waiter, GroupAnswer)> {
        let Some(g) = groups.get_mut(name) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(c) = g.classic.as_mut() {
            for (ticket, completed) in c.take_completed() {
                match g.waiting.remove(&ticket.get()) {
                    Some(w) => out.push((w, Ok(completed))),
                    None => debug!(group = name, "a group answered a ticket nobody waits for"),
                }
            }
        }
        let next = g.next_deadline_ms();
        if next != g.scheduled_ms {
            let mut index = self.deadlines.borrow_mut();
            if let Some(old) = g.scheduled_ms {
                index.remove(old, name);
            }
            if let Some(new) = next {
                index.insert(new, name);
                if new < self.timer_armed_ms.get() {
                    self.timer_wake.borrow().fire();
                }
            }
            g.scheduled_ms = next;
        }
        if g.is_forgettable() {
            groups.remove(name);
        }
        out
    }

    /// Takes every timer index entry due at `now_ms`.
    fn take_due(&self, now_ms: i64) -> Vec<(i64, String)> {
        self.deadlines.borrow_mut().take_due(now_ms)
    }

    /// Whether any coordinator partition of this shard is still loading.
    fn any_loading(&self) -> bool {
        self.partitions
            .borrow()
            .values()
            .any(|cp| cp.load.state == keel_coordinator::runtime::LoadState::Loading)
    }
}

/// Runs `f` on group `name` (created, for partition `p`, if missing and `create`; else `None`
/// if missing) with the clock, then settles the group and delivers the answers it produced.
/// No borrow outlives the call.
pub(super) fn with_group<R>(
    shard: &Rc<BrokerShard>,
    p: i32,
    name: &str,
    create: bool,
    f: impl FnOnce(&mut GroupEntry, i64) -> R,
) -> Option<R> {
    let (result, deliveries, partition, records, classic_generation) = {
        let mut groups = shard.groups.groups.borrow_mut();
        let entry = if create {
            Some(
                groups
                    .entry(name.to_string())
                    .or_insert_with(|| GroupEntry::new(p)),
            )
        } else {
            groups.get_mut(name)
        };
        let entry = entry?;
        let generation_before = entry.classic.as_ref().map(ClassicGroup::generation_id);
        let result = f(entry, shard.clock.monotonic_ms());
        if let Some(c) = entry.classic.as_ref() {
            if generation_before.unwrap_or(0) != c.generation_id() {
                log_generation(shard, c);
            }
        }
        let classic_change = entry
            .classic
            .as_mut()
            .and_then(ClassicGroup::take_metadata_change);
        let classic_generation = match &classic_change {
            Some(super::records::GroupMetadataChange::Store(_, v)) => Some(v.generation_id),
            _ => None,
        };
        let mut records = super::membership_records(entry, classic_change);
        if entry.is_forgettable() {
            records.extend(super::forget_records(entry));
        }
        let partition = entry.partition;
        (
            result,
            shard.groups.settle(&mut groups, name),
            partition,
            records,
            classic_generation,
        )
    };
    super::persist(shard, partition, name, records, classic_generation);
    deliver(shard, deliveries);
    Some(result)
}

/// A new generation formed (Kafka logs "Stabilized group ...").
fn log_generation(shard: &BrokerShard, c: &ClassicGroup) {
    tracing::info!(
        shard = shard.id,
        group = c.group_id(),
        generation = c.generation_id(),
        members = c.member_count(),
        protocol = c.protocol_name().unwrap_or_default(),
        leader = c.leader_id().unwrap_or_default(),
        "group generation formed"
    );
}

fn ready(shard: &BrokerShard, p: i32) -> Result<(), ErrorCode> {
    match super::ready(shard, p) {
        ErrorCode::NONE => Ok(()),
        e => Err(e),
    }
}

// ---- operations, on the coordinator shard ------------------------------------------------

/// JoinGroup: the answer now, or `None` when it comes later to `waiter`. Creates the group's
/// classic membership on its first join (and anew after a deletion).
pub async fn join_group(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    request: JoinRequest,
    waiter: Waiter,
) -> Result<Option<JoinResponse>, ErrorCode> {
    ready(&shard, p)?;
    let config = group_config(&shard.config);
    let name = group.clone();
    with_group(&shard, p, &group, true, move |g, now| {
        if g.active_consumer().is_some() {
            // Kafka (without online migration): a consumer group with members takes no
            // classic member.
            return Err(ErrorCode::of(ResponseError::InconsistentGroupProtocol));
        }
        if g.live_classic().is_none() {
            g.classic = Some(ClassicGroup::new(name, config));
        }
        let reply = g
            .classic
            .as_mut()
            .map(|c| c.join(request, now))
            .ok_or(ErrorCode::of(ResponseError::UnknownServerError))?;
        Ok(match reply {
            Reply::Now(response) => Some(response),
            Reply::Later(ticket) => {
                g.waiting.insert(ticket.get(), waiter);
                None
            }
        })
    })
    .unwrap_or(Err(ErrorCode::of(ResponseError::UnknownServerError)))
}

/// SyncGroup: the answer now, or `None` when it comes later to `waiter`. UNKNOWN_MEMBER_ID
/// for a group without a live membership.
pub async fn sync_group(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    request: SyncRequest,
    waiter: Waiter,
) -> Result<Option<SyncResponse>, ErrorCode> {
    ready(&shard, p)?;
    with_group(&shard, p, &group, false, move |g, now| {
        let c = g
            .live_classic()
            .ok_or(ErrorCode::of(ResponseError::UnknownMemberId))?;
        Ok(match c.sync(request, now) {
            Reply::Now(response) => Some(response),
            Reply::Later(ticket) => {
                g.waiting.insert(ticket.get(), waiter);
                None
            }
        })
    })
    .unwrap_or(Err(ErrorCode::of(ResponseError::UnknownMemberId)))
}

/// Heartbeat: ErrorCode::NONE or the error code for the member.
pub async fn heartbeat(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    member_id: String,
    instance_id: Option<String>,
    generation_id: i32,
) -> Result<ErrorCode, ErrorCode> {
    ready(&shard, p)?;
    Ok(with_group(&shard, p, &group, false, |g, now| {
        g.live_classic()
            .map_or(ErrorCode::of(ResponseError::UnknownMemberId), |c| {
                c.heartbeat(&member_id, instance_id.as_deref(), generation_id, now)
            })
    })
    .unwrap_or(ErrorCode::of(ResponseError::UnknownMemberId)))
}

/// LeaveGroup: one error code per leaving member (UNKNOWN_MEMBER_ID for each in a group
/// without a live membership), or an error for the whole request.
pub async fn leave_group(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    leaving: Vec<LeavingMember>,
) -> Result<Vec<ErrorCode>, ErrorCode> {
    ready(&shard, p)?;
    let unknown = vec![ErrorCode::of(ResponseError::UnknownMemberId); leaving.len()];
    with_group(&shard, p, &group, false, |g, now| match g.live_classic() {
        Some(c) => c.leave(&leaving, now),
        None => Ok(unknown.clone()),
    })
    .unwrap_or(Ok(unknown))
}

/// DescribeGroups of one group: a group only with offsets is `Empty` without a protocol
/// type; an unknown group is `Dead` (Kafka's answer before DescribeGroups v6).
pub async fn describe_group(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
) -> Result<GroupDescription, ErrorCode> {
    ready(&shard, p)?;
    let description = |state| GroupDescription {
        state,
        protocol_type: String::new(),
        protocol: String::new(),
        members: Vec::new(),
    };
    Ok(with_group(&shard, p, &group, false, |g, now| {
        if g.active_consumer().is_some() {
            // Kafka before DescribeGroups v6: a group that is not classic is described Dead.
            return description(GroupState::Dead);
        }
        match g.classic.as_mut() {
            Some(c) => {
                // Apply the timeouts due, so the answer does not show members already gone.
                c.tick(now);
                c.describe()
            }
            None => description(GroupState::Empty),
        }
    })
    .unwrap_or_else(|| description(GroupState::Dead)))
}

/// DeleteGroups of one group: only a group without members (Kafka: `Empty`) can go. It is
/// marked `Dead`, and its offsets (those committed and those on their way) are deleted with
/// tombstones; it is forgotten once they are applied. GROUP_ID_NOT_FOUND for an unknown or
/// already deleted group, NON_EMPTY_GROUP for one with members.
pub async fn delete_group(shard: Rc<BrokerShard>, p: i32, group: String) -> Result<(), ErrorCode> {
    ready(&shard, p)?;
    let changes = with_group(&shard, p, &group, false, |g, now| {
        if let Some(c) = g.consumer.as_mut() {
            c.tick(now);
            if !c.is_empty() {
                return Err(ErrorCode::of(ResponseError::NonEmptyGroup));
            }
        }
        if let Some(c) = g.classic.as_mut() {
            c.delete()?;
        } else if g.consumer.is_none() && g.offsets.is_empty() && g.waiting.is_empty() {
            return Err(ErrorCode::of(ResponseError::GroupIdNotFound));
        }
        g.consumer = None;
        let mut keys: Vec<(String, i32)> = g.offsets.keys().cloned().collect();
        keys.extend(shard.groups.pending_keys(p, &group));
        keys.sort();
        keys.dedup();
        Ok::<_, ErrorCode>(
            keys.into_iter()
                .map(|(topic, partition)| OffsetChange::delete(&group, &topic, partition))
                .collect::<Vec<_>>(),
        )
    })
    .unwrap_or(Err(ErrorCode::of(ResponseError::GroupIdNotFound)))?;
    // Decided and appended in one step (no await between): a commit that comes later is
    // appended after the tombstones.
    write(&shard, p, changes).await
}

/// One group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    /// Kafka's name of the state ("Stable", "Empty", "Reconciling", ...).
    pub state: &'static str,
    /// "classic" or "consumer" (ListGroups v5's group type).
    pub group_type: &'static str,
}

/// The groups this shard coordinates (of the partitions it serves now), and whether any of
/// its coordinator partitions is still loading.
fn list_local(shard: &BrokerShard) -> (bool, Vec<ListedGroup>) {
    let served: std::collections::HashSet<i32> = shard
        .groups
        .partitions
        .borrow()
        .keys()
        .copied()
        .filter(|p| super::ready(shard, *p) == ErrorCode::NONE)
        .collect();
    let groups = shard.groups.groups.borrow();
    let listed = groups
        .iter()
        .filter(|(_, g)| served.contains(&g.partition))
        .filter_map(|(name, g)| {
            if let Some(c) = g.consumer.as_ref() {
                if !c.is_empty() || g.live_classic_ref().is_none() {
                    return Some(ListedGroup {
                        group_id: name.clone(),
                        protocol_type:
                            keel_coordinator::group::group_metadata_manager::CONSUMER_PROTOCOL_TYPE
                                .to_string(),
                        state: c.state().as_str(),
                        group_type: "consumer",
                    });
                }
            }
            let (protocol_type, state) = match &g.classic {
                Some(c) => (c.protocol_type().unwrap_or_default(), c.state()),
                None => ("", GroupState::Empty),
            };
            (state != GroupState::Dead).then(|| ListedGroup {
                group_id: name.clone(),
                protocol_type: protocol_type.to_string(),
                state: state.as_str(),
                group_type: "classic",
            })
        })
        .collect();
    (shard.groups.any_loading(), listed)
}

/// ListGroups: every group of every coordinator shard of this broker, gathered over the
/// mesh. The error is COORDINATOR_LOAD_IN_PROGRESS while a coordinator partition loads (the
/// groups listed are those already loaded), or COORDINATOR_NOT_AVAILABLE if a shard did not
/// answer.
pub async fn list_groups(shard: &Rc<BrokerShard>) -> (ErrorCode, Vec<ListedGroup>) {
    let asks = (0..shard.count).map(|target| {
        let shard = shard.clone();
        async move {
            if target == shard.id {
                return Some(list_local(&shard));
            }
            match shard
                .mesh
                .call(target, |s| async move { list_local(&s) })
                .await
            {
                Ok(answer) => Some(answer),
                Err(e) => {
                    debug!(target, error = %e, "ListGroups: a shard did not answer");
                    None
                }
            }
        }
    });
    let mut error = ErrorCode::NONE;
    let mut all = Vec::new();
    for answer in join_all(asks.collect()).await {
        match answer {
            Some((loading, groups)) => {
                if loading && error == ErrorCode::NONE {
                    error = ErrorCode::of(ResponseError::CoordinatorLoadInProgress);
                }
                all.extend(groups);
            }
            None => error = ErrorCode::of(ResponseError::CoordinatorNotAvailable),
        }
    }
    all.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    (error, all)
}

// ---- the timer ---------------------------------------------------------------------------

/// Starts this shard's group timer task (once).
pub fn start_timer(shard: &Rc<BrokerShard>) {
    if shard.groups.timer_started.replace(true) {
        return;
    }
    glommio::spawn_local(timer(shard.clone())).detach();
}

/// Until shutdown: ticks every group whose next deadline is due, then sleeps until the
/// earliest one (or until a call into a group brings an earlier one).
async fn timer(shard: Rc<BrokerShard>) {
    loop {
        for (deadline, name) in shard.groups.take_due(shard.clock.monotonic_ms()) {
            with_group(&shard, 0, &name, false, |g, now| {
                if g.scheduled_ms == Some(deadline) {
                    g.scheduled_ms = None;
                }
                if let Some(c) = g.classic.as_mut() {
                    c.tick(now);
                }
                if let Some(c) = g.consumer.as_mut() {
                    consumer_tick(shard.id, c, now);
                }
            });
            glommio::executor().yield_if_needed().await;
        }
        let wake = Event::new();
        *shard.groups.timer_wake.borrow_mut() = wake.clone();
        let next = shard.groups.deadlines.borrow().next_deadline_ms();
        shard.groups.timer_armed_ms.set(next.unwrap_or(i64::MAX));
        let sleep_ms = next.map_or(TIMER_IDLE_MS, |d| {
            d.saturating_sub(shard.clock.monotonic_ms())
                .clamp(0, TIMER_IDLE_MS)
        });
        let interval = Duration::from_millis(sleep_ms as u64);
        if !shard
            .sleep_or_wake_unless_shutdown(interval, Some(&wake))
            .await
        {
            debug!(shard = shard.id, "group timer stopped");
            return;
        }
    }
}

/// Applies the group's timeouts due at `now_ms`, logging each member removed (Kafka logs each
/// fenced member).
pub fn consumer_tick(
    shard: usize,
    group: &mut keel_coordinator::group::consumer_group::ConsumerGroup,
    now_ms: i64,
) {
    let expired: Vec<keel_coordinator::group::consumer_group::Expired> = group.tick(now_ms);
    for e in expired {
        tracing::info!(
            shard,
            group = group.group_id(),
            member = e.member_id,
            reason = ?e.reason,
            group_epoch = group.group_epoch(),
            "consumer group member removed"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;

    use super::*;
    use keel_coordinator::group::classic_group::{LeavingMember, Ticket};

    fn join(member_id: &str) -> JoinRequest {
        JoinRequest {
            member_id: member_id.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
            require_known_member_id: false,
        }
    }

    fn joined_now(c: &mut ClassicGroup, member_id: &str, now: i64) -> JoinResponse {
        match c.join(join(member_id), now) {
            Reply::Now(r) => r,
            Reply::Later(_) => panic!("expected an answer now"),
        }
    }

    fn joined_later(c: &mut ClassicGroup, member_id: &str, now: i64) -> Ticket {
        match c.join(join(member_id), now) {
            Reply::Later(t) => t,
            Reply::Now(r) => panic!("expected to wait, got {r:?}"),
        }
    }

    #[test]
    fn settle_delivers_answers_indexes_deadlines_and_forgets_empty_groups() {
        let coordinator = GroupCoordinator::default();
        coordinator.timer_armed_ms.set(i64::MAX);
        let wake = coordinator.timer_wake.borrow().clone();
        let mut groups: HashMap<String, GroupEntry> = HashMap::new();
        let mut entry = GroupEntry::new(3);
        let c = entry
            .classic
            .insert(ClassicGroup::new("g", GroupConfig::default()));
        let first = joined_now(c, "", 0).member_id;
        // A second member waits until the first rejoins.
        let ticket = joined_later(c, "", 1);
        let waiter = Waiter { shard: 1, token: 7 };
        entry.waiting.insert(ticket.get(), waiter);
        groups.insert("g".into(), entry);
        assert!(coordinator.settle(&mut groups, "g").is_empty());
        let scheduled = groups["g"].scheduled_ms.expect("a rebalance deadline");
        assert!(coordinator.deadlines.borrow().contains(scheduled, "g"));
        assert!(wake.is_fired(), "an earlier deadline wakes the timer");

        // The first member rejoins: both answers come out, the parked one for its waiter.
        let c = groups.get_mut("g").unwrap().classic.as_mut().unwrap();
        let own = joined_now(c, &first, 2);
        assert_eq!(own.generation_id, 2);
        let delivered = coordinator.settle(&mut groups, "g");
        assert_eq!(delivered.len(), 1);
        let (w, answer) = &delivered[0];
        assert_eq!(*w, waiter);
        let Ok(Completed::Join(r)) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!((r.error, r.generation_id), (ErrorCode::NONE, 2));
        assert!(groups["g"].waiting.is_empty());
        let second = r.member_id.clone();

        // Both leave: the group is Empty with nothing to keep and no timer. It stays until the
        // expiry check; deleted, it is forgotten.
        let c = groups.get_mut("g").unwrap().classic.as_mut().unwrap();
        let leaving: Vec<LeavingMember> = [first, second]
            .into_iter()
            .map(|member_id| LeavingMember {
                member_id,
                group_instance_id: None,
            })
            .collect();
        assert_eq!(
            c.leave(&leaving, 3),
            Ok(vec![ErrorCode::NONE, ErrorCode::NONE])
        );
        coordinator.settle(&mut groups, "g");
        assert!(groups["g"].is_idle());
        assert!(coordinator.deadlines.borrow().is_empty());
        let c = groups.get_mut("g").unwrap().classic.as_mut().unwrap();
        assert_eq!(c.delete(), Ok(()));
        coordinator.settle(&mut groups, "g");
        assert!(groups.is_empty());
    }

    #[test]
    fn a_parked_request_gets_its_answer_once() {
        let coordinator = GroupCoordinator::default();
        let (tx, mut rx) = futures_channel::oneshot::channel();
        coordinator.parked.borrow_mut().insert(5, tx);
        coordinator.complete_parked(5, Err(ErrorCode::from_code(16)));
        // Gone from the table: a second answer (or one for a closed connection) is dropped.
        coordinator.complete_parked(5, Err(ErrorCode::from_code(15)));
        assert!(matches!(rx.try_recv(), Ok(Some(Err(e))) if e.code() == 16));
        assert!(coordinator.parked.borrow().is_empty());
    }
}
