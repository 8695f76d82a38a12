//! Elections an operator or the controller's balancing asks for, not forced by a broker
//! coming or going: ElectLeaders (API key 43) with Kafka's election types, PREFERRED (move
//! leadership to the first replica in replica order) and UNCLEAN (give an offline partition a
//! leader, from outside the ISR if need be), and the periodic leader rebalance
//! (`auto.leader.rebalance.enable`). Kafka's `ReplicationControlManager.electLeaders` /
//! `electLeader`, `PartitionChangeBuilder`'s PREFERRED and UNCLEAN elections, and the
//! per-broker imbalance check of ZooKeeper-mode `KafkaController.checkAndTriggerAutoLeaderRebalance`.
//!
//! Pure functions over a [`ClusterImage`], run on the controller leader (`node.rs`) like the
//! rest of [`super`]; every record carries its epoch preconditions, so a decision made on a
//! stale image is rejected when applied. A preferred election keeps the ISR and bumps the
//! leader epoch; it never elects a replica that is fenced or outside the ISR (nor, when the
//! ISR is empty, outside the ELR).

use std::collections::BTreeMap;

use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;
use serde::{Deserialize, Serialize};

use super::{can_lead, is_live, partition_of, Rules, Target, Unclean};
use crate::image::{codes, ClusterImage, PartitionInfo, TopicInfo};
use crate::records::Record;

/// Kafka's ELECTION_NOT_NEEDED (84).
pub const ELECTION_NOT_NEEDED: i16 = ErrorCode::of(ResponseError::ElectionNotNeeded).code();
/// Kafka's PREFERRED_LEADER_NOT_AVAILABLE (80).
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 =
    ErrorCode::of(ResponseError::PreferredLeaderNotAvailable).code();
/// Kafka's ELIGIBLE_LEADERS_NOT_AVAILABLE (83).
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 =
    ErrorCode::of(ResponseError::EligibleLeadersNotAvailable).code();

/// Kafka's `ElectionType`, with its wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    /// 0: the first replica in replica order leads, when it is live and in the ISR.
    Preferred,
    /// 1: a partition without a leader gets one, from outside the ISR and ELR if none inside
    /// is live (acknowledged records may be lost).
    Unclean,
}

impl ElectionType {
    /// The type an ElectLeaders request's `election_type` names; None for an unknown value.
    pub fn from_wire(value: i8) -> Option<ElectionType> {
        match value {
            0 => Some(ElectionType::Preferred),
            1 => Some(ElectionType::Unclean),
            _ => None,
        }
    }
}

/// An ElectLeaders request, by topic name as on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectLeadersRequest {
    pub election_type: ElectionType,
    /// None: every partition of every topic (Kafka's null `topic_partitions`); the answer
    /// then leaves out the partitions that needed no election.
    pub topics: Option<Vec<TopicPartitions>>,
}

/// One topic's entry of a request, as sent (duplicates and all).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// One topic's results, one per request entry (Kafka answers each entry of the request,
/// a topic named twice included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicElectionResults {
    pub topic: String,
    pub partitions: Vec<PartitionElectionResult>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionElectionResult {
    pub partition: i32,
    /// 0: a new leader was elected.
    pub error_code: i16,
    pub error_message: Option<String>,
}

/// Why one partition got no election: its Kafka error code and message.
pub type ElectionError = (i16, String);

/// The records and answers of an ElectLeaders request. Every partition is decided on
/// `image`; a partition named more than once is decided once and every mention gets that
/// answer (Kafka decides each mention on the same state, so they agree), with one record.
pub fn elect_leaders<'a>(
    image: &'a ClusterImage,
    request: &'a ElectLeadersRequest,
) -> (Vec<TopicElectionResults>, Vec<Record>) {
    let mut decisions = Decisions {
        image,
        election: request.election_type,
        decided: BTreeMap::new(),
        records: Vec::new(),
    };
    let mut decide = |topic: &'a str, partition: i32| decisions.decide(topic, partition);
    let results = match &request.topics {
        None => image
            .topics
            .values()
            .map(|t| TopicElectionResults {
                topic: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .filter_map(|p| {
                        let outcome = decide(&t.name, p.partition);
                        // Kafka leaves out what needed no election when asked for everything.
                        (!matches!(outcome, Err((code, _)) if code == ELECTION_NOT_NEEDED))
                            .then(|| result(p.partition, outcome))
                    })
                    .collect(),
            })
            .collect(),
        Some(topics) => topics
            .iter()
            .map(|t| TopicElectionResults {
                topic: t.topic.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| result(*p, decide(&t.topic, *p)))
                    .collect(),
            })
            .collect(),
    };
    (results, decisions.records)
}

/// Each partition's outcome, decided once, and the records of those elected.
struct Decisions<'a> {
    image: &'a ClusterImage,
    election: ElectionType,
    decided: BTreeMap<(&'a str, i32), Result<(), ElectionError>>,
    records: Vec<Record>,
}

impl<'a> Decisions<'a> {
    fn decide(&mut self, topic: &'a str, partition: i32) -> Result<(), ElectionError> {
        if let Some(outcome) = self.decided.get(&(topic, partition)) {
            return outcome.clone();
        }
        let outcome = elect_leader(self.image, topic, partition, self.election)
            .map(|record| self.records.push(record));
        self.decided.insert((topic, partition), outcome.clone());
        outcome
    }
}

fn result(partition: i32, outcome: Result<(), ElectionError>) -> PartitionElectionResult {
    match outcome {
        Ok(()) => PartitionElectionResult {
            partition,
            error_code: 0,
            error_message: None,
        },
        Err((error_code, message)) => PartitionElectionResult {
            partition,
            error_code,
            error_message: Some(message),
        },
    }
}

/// One partition's election (Kafka's `electLeader`): the record that moves its leadership,
/// or why there is none: UNKNOWN_TOPIC_OR_PARTITION; ELECTION_NOT_NEEDED when the preferred
/// replica leads already (PREFERRED) or the partition has a leader (UNCLEAN);
/// PREFERRED_LEADER_NOT_AVAILABLE when the preferred replica is fenced or not in the ISR;
/// ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live (UNCLEAN).
pub fn elect_leader(
    image: &ClusterImage,
    topic: &str,
    partition: i32,
    election: ElectionType,
) -> Result<Record, ElectionError> {
    let unknown = || {
        (
            codes::UNKNOWN_TOPIC_OR_PARTITION,
            format!("No such partition as {topic}-{partition}"),
        )
    };
    let t = image.topic(topic).ok_or_else(unknown)?;
    let p = partition_of(t, partition).ok_or_else(unknown)?;
    let target = match election {
        ElectionType::Preferred => preferred_target(image, t, p)?,
        ElectionType::Unclean => unclean_target(image, t, p)?,
    };
    // Both elections change the leader, so there is always a record; none would mean the
    // election found nothing to do, which is what PREFERRED_LEADER_NOT_AVAILABLE says.
    target
        .record(t.topic_id, p)
        .ok_or_else(|| not_available(t, p, "the election changed nothing"))
}

/// Whether `replica` may lead `p` of `t` now (Kafka's `isValidNewLeader`): live with its
/// replica online, and in the ISR, or in the ELR when the ISR is empty.
fn valid_leader(image: &ClusterImage, t: &TopicInfo, p: &PartitionInfo, replica: i32) -> bool {
    let eligible = p.isr.contains(&replica) || (p.isr.is_empty() && p.elr.contains(&replica));
    eligible && can_lead(image, replica, &t.topic_id, p.partition)
}

/// Kafka's PREFERRED election: the preferred replica when it may lead; else, when the current
/// leader may go on leading, nothing (PREFERRED_LEADER_NOT_AVAILABLE); else (no leader) the
/// first other replica that may lead.
fn preferred_target(
    image: &ClusterImage,
    t: &TopicInfo,
    p: &PartitionInfo,
) -> Result<Target, ElectionError> {
    let Some(&preferred) = p.replicas.first() else {
        return Err(not_available(t, p, "it has no replicas"));
    };
    if p.leader == preferred {
        return Err((
            ELECTION_NOT_NEEDED,
            format!(
                "Broker {preferred} already leads {}-{}, its preferred replica.",
                t.name, p.partition
            ),
        ));
    }
    let leader = if valid_leader(image, t, p, preferred) {
        preferred
    } else if p.leader != -1 && valid_leader(image, t, p, p.leader) {
        return Err(not_available(
            t,
            p,
            "the preferred replica is fenced or not in the ISR",
        ));
    } else {
        p.replicas[1..]
            .iter()
            .copied()
            .find(|r| valid_leader(image, t, p, *r))
            .ok_or_else(|| not_available(t, p, "no replica in the ISR is live"))?
    };
    let mut target = Target::of(p);
    target.leader = leader;
    if !target.isr.contains(&leader) {
        // Elected from the ELR of an empty ISR: it is the ISR alone, as `Target::elect` does.
        target.set_isr(vec![leader], &[], &Rules::of(image, t, Unclean::Disabled));
    }
    Ok(target)
}

fn not_available(t: &TopicInfo, p: &PartitionInfo, why: &str) -> ElectionError {
    (
        PREFERRED_LEADER_NOT_AVAILABLE,
        format!(
            "Failed to elect the preferred replica {:?} of {}-{}: {why}.",
            p.replicas.first(),
            t.name,
            p.partition
        ),
    )
}

/// Kafka's UNCLEAN election: only for a partition without a leader; the first live ISR
/// member, else ELR member, else any live replica (which becomes the ISR alone).
fn unclean_target(
    image: &ClusterImage,
    t: &TopicInfo,
    p: &PartitionInfo,
) -> Result<Target, ElectionError> {
    if p.leader != -1 {
        return Err((
            ELECTION_NOT_NEEDED,
            format!(
                "{}-{} has a leader, broker {}.",
                t.name, p.partition, p.leader
            ),
        ));
    }
    let mut target = Target::of(p);
    target.elect(
        &|id| can_lead(image, id, &t.topic_id, p.partition),
        &Rules::of(image, t, Unclean::Enabled),
    );
    if target.leader == -1 {
        return Err((
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            format!(
                "No replica of {}-{} ({:?}) is live.",
                t.name, p.partition, p.replicas
            ),
        ));
    }
    Ok(target)
}

/// Most preferred elections one rebalance round commits (Kafka's
/// `maxElectionsPerImbalance`); a round that reaches it runs again at once.
pub const LEADER_REBALANCE_ELECTIONS_MAX: usize = 1000;

/// One broker's partitions as their preferred replica, in image order.
#[derive(Default)]
struct PreferredBy<'a> {
    count: usize,
    /// Those another broker (or nobody) leads.
    led_by_others: Vec<(&'a TopicInfo, &'a PartitionInfo)>,
}

/// The preferred elections of one automatic rebalance round (`auto.leader.rebalance.enable`):
/// for each live broker, its imbalance is the share of the partitions whose preferred replica
/// it is that another broker (or nobody) leads; above `imbalance_percentage` percent, each of
/// those partitions where it may lead (live, in the ISR) gets it back as leader. At most
/// `max` records.
pub fn leader_rebalance_records(
    image: &ClusterImage,
    imbalance_percentage: u32,
    max: usize,
) -> Vec<Record> {
    let mut by_broker: BTreeMap<i32, PreferredBy<'_>> = BTreeMap::new();
    for t in image.topics.values() {
        for p in &t.partitions {
            let Some(&preferred) = p.replicas.first() else {
                continue;
            };
            if !is_live(image, preferred) {
                continue;
            }
            let entry = by_broker.entry(preferred).or_default();
            entry.count += 1;
            if p.leader != preferred {
                entry.led_by_others.push((t.as_ref(), p));
            }
        }
    }
    let mut records = Vec::new();
    for (
        broker,
        PreferredBy {
            count,
            led_by_others,
        },
    ) in by_broker
    {
        // led_by_others / count > percentage / 100, in integers.
        let imbalanced =
            led_by_others.len() as u64 * 100 > u64::from(imbalance_percentage) * count as u64;
        if !imbalanced {
            continue;
        }
        for (t, p) in led_by_others {
            if records.len() >= max {
                return records;
            }
            if !valid_leader(image, t, p, broker) {
                continue;
            }
            if let Ok(target) = preferred_target(image, t, p) {
                if target.leader == broker {
                    records.extend(target.record(t.topic_id, p));
                }
            }
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::partition_change::{fence_records, registration_records, unfence_records};
    use crate::records::TopicId;
    use crate::registration::BrokerRegistration;
    use crate::ApplyOutcome;

    const TOPIC: TopicId = [7; 16];

    fn registration(broker_id: i32) -> BrokerRegistration {
        BrokerRegistration {
            broker_id,
            incarnation_id: [broker_id as u8; 16],
            host: format!("b{broker_id}"),
            port: 9092,
            rack: None,
            controller_addr: None,
            shard_count: 1,
            inter_broker_host: None,
            inter_broker_port: None,
            inter_broker_shard_ports: Vec::new(),
            previous_broker_epoch: -1,
            listeners: Vec::new(),
        }
    }

    fn apply(image: &Arc<ClusterImage>, records: &[Record]) -> Arc<ClusterImage> {
        let (next, outcome) = image.apply(image.applied_index + 1, records);
        assert_eq!(outcome, ApplyOutcome::Applied, "{records:?}");
        next
    }

    /// Brokers 1..=3 live; topic "t" with `partitions` partitions on all three brokers,
    /// partition p preferring broker 1 + p % 3, each led by its preferred replica.
    fn cluster(partitions: i32) -> Arc<ClusterImage> {
        let mut image = Arc::new(ClusterImage::default());
        for b in 1..=3 {
            let records = registration_records(&image, &registration(b), Unclean::Disabled);
            image = apply(&image, &records);
        }
        let mut records = vec![Record::TopicCreated {
            name: "t".into(),
            topic_id: TOPIC,
        }];
        for p in 0..partitions {
            let replicas: Vec<i32> = (0..3).map(|k| 1 + (p + k) % 3).collect();
            records.push(Record::PartitionCreated {
                topic_id: TOPIC,
                partition: p,
                isr: replicas.clone(),
                leader: replicas[0],
                replicas,
                leader_epoch: 0,
            });
        }
        apply(&image, &records)
    }

    fn part(image: &ClusterImage, p: usize) -> &PartitionInfo {
        &image.topic("t").unwrap().partitions[p]
    }

    /// Sets partition `p`'s leader and ISR as a controller would (epochs checked; the record
    /// built by `Target`, so it has whatever fields `PartitionChanged` has).
    fn set(image: &Arc<ClusterImage>, p: i32, leader: i32, isr: &[i32]) -> Arc<ClusterImage> {
        let old = part(image, p as usize);
        let mut target = Target::of(old);
        target.leader = leader;
        target.isr = isr.to_vec();
        let record = target.record(TOPIC, old).expect("a change");
        apply(image, &[record])
    }

    fn request(election_type: ElectionType, topics: &[(&str, &[i32])]) -> ElectLeadersRequest {
        ElectLeadersRequest {
            election_type,
            topics: Some(
                topics
                    .iter()
                    .map(|(t, ps)| TopicPartitions {
                        topic: t.to_string(),
                        partitions: ps.to_vec(),
                    })
                    .collect(),
            ),
        }
    }

    fn codes_of(results: &[TopicElectionResults]) -> Vec<(String, i32, i16)> {
        results
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.clone(), p.partition, p.error_code))
            })
            .collect()
    }

    #[test]
    fn preferred_election_moves_leadership_back_with_a_new_epoch_and_the_same_isr() {
        let image = set(&cluster(1), 0, 2, &[1, 2, 3]);
        let before = part(&image, 0).clone();
        let (results, records) =
            elect_leaders(&image, &request(ElectionType::Preferred, &[("t", &[0])]));
        assert_eq!(codes_of(&results), [("t".to_string(), 0, 0)]);
        let after = apply(&image, &records);
        let p = part(&after, 0);
        assert_eq!(p.leader, 1);
        assert_eq!(p.leader_epoch, before.leader_epoch + 1);
        assert_eq!(p.isr, before.isr);
        assert_eq!(p.partition_epoch, before.partition_epoch + 1);
    }

    #[test]
    fn preferred_election_error_codes() {
        // p0 led by its preferred replica; p1 led by 1 while its preferred (2) is out of the
        // ISR; p2 led by 1 while its preferred (3) is fenced (still in the ISR).
        let image = cluster(3);
        let image = set(&image, 1, 1, &[1, 3]);
        let image = set(&image, 2, 1, &[3, 1, 2]);
        let image = apply(&image, &[Record::BrokerFenced { broker_id: 3 }]);
        let (results, records) = elect_leaders(
            &image,
            &request(
                ElectionType::Preferred,
                &[("t", &[0, 1, 2, 3, -1]), ("nope", &[0])],
            ),
        );
        assert_eq!(
            codes_of(&results),
            [
                ("t".to_string(), 0, ELECTION_NOT_NEEDED),
                ("t".to_string(), 1, PREFERRED_LEADER_NOT_AVAILABLE),
                ("t".to_string(), 2, PREFERRED_LEADER_NOT_AVAILABLE),
                ("t".to_string(), 3, codes::UNKNOWN_TOPIC_OR_PARTITION),
                ("t".to_string(), -1, codes::UNKNOWN_TOPIC_OR_PARTITION),
                ("nope".to_string(), 0, codes::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
        assert!(records.is_empty());
    }

    #[test]
    fn preferred_election_of_a_leaderless_partition_takes_the_first_live_isr_member() {
        // Every replica fenced, then 3 back: the ISR kept its last member 3, which leads
        // already. Stop there with 3 fenced again and bring 2 back without the ISR: nobody.
        let image = cluster(1);
        let image = apply(&image, &fence_records(&image, 1, Unclean::Disabled));
        let image = apply(&image, &fence_records(&image, 2, Unclean::Disabled));
        let image = apply(&image, &fence_records(&image, 3, Unclean::Disabled));
        assert_eq!(
            (part(&image, 0).leader, part(&image, 0).isr.clone()),
            (-1, vec![3])
        );
        let req = request(ElectionType::Preferred, &[("t", &[0])]);
        let (results, _) = elect_leaders(&image, &req);
        assert_eq!(
            results[0].partitions[0].error_code,
            PREFERRED_LEADER_NOT_AVAILABLE
        );
        // 3 live again but its unfencing not yet decided on partitions: the preferred
        // election elects it, the first live ISR member, though it is not preferred.
        let image = apply(&image, &[Record::BrokerUnfenced { broker_id: 3 }]);
        let (results, records) = elect_leaders(&image, &req);
        assert_eq!(results[0].partitions[0].error_code, 0);
        assert_eq!(part(&apply(&image, &records), 0).leader, 3);
    }

    #[test]
    fn duplicates_get_one_decision_and_one_record() {
        let image = set(&cluster(1), 0, 3, &[1, 2, 3]);
        let (results, records) = elect_leaders(
            &image,
            &request(ElectionType::Preferred, &[("t", &[0, 0]), ("t", &[0])]),
        );
        assert_eq!(
            codes_of(&results),
            [
                ("t".to_string(), 0, 0),
                ("t".to_string(), 0, 0),
                ("t".to_string(), 0, 0)
            ]
        );
        assert_eq!(results.len(), 2, "one entry per request entry");
        assert_eq!(records.len(), 1);
        assert_eq!(part(&apply(&image, &records), 0).leader, 1);
    }

    #[test]
    fn all_partitions_leaves_out_those_that_need_no_election() {
        let image = set(&cluster(3), 1, 3, &[2, 3, 1]);
        let (results, records) = elect_leaders(
            &image,
            &ElectLeadersRequest {
                election_type: ElectionType::Preferred,
                topics: None,
            },
        );
        assert_eq!(codes_of(&results), [("t".to_string(), 1, 0)]);
        assert_eq!(part(&apply(&image, &records), 1).leader, 2);
    }

    #[test]
    fn unclean_election_elects_a_live_replica_outside_the_isr_only_without_a_leader() {
        // All fenced: offline with ISR [3]; then 1 comes back (not in the ISR).
        let image = cluster(1);
        let image = apply(&image, &fence_records(&image, 1, Unclean::Disabled));
        let image = apply(&image, &fence_records(&image, 2, Unclean::Disabled));
        let image = apply(&image, &fence_records(&image, 3, Unclean::Disabled));
        let req = request(ElectionType::Unclean, &[("t", &[0])]);
        let (results, _) = elect_leaders(&image, &req);
        assert_eq!(
            results[0].partitions[0].error_code,
            ELIGIBLE_LEADERS_NOT_AVAILABLE
        );

        let image = apply(&image, &unfence_records(&image, 1, Unclean::Disabled));
        assert_eq!(
            part(&image, 0).leader,
            -1,
            "clean election leaves it offline"
        );
        let epoch = part(&image, 0).leader_epoch;
        let (results, records) = elect_leaders(&image, &req);
        assert_eq!(results[0].partitions[0].error_code, 0);
        let image = apply(&image, &records);
        let p = part(&image, 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (1, vec![1], epoch + 1)
        );

        let (results, records) = elect_leaders(&image, &req);
        assert_eq!(results[0].partitions[0].error_code, ELECTION_NOT_NEEDED);
        assert!(records.is_empty());
    }

    #[test]
    fn election_types_from_the_wire() {
        assert_eq!(ElectionType::from_wire(0), Some(ElectionType::Preferred));
        assert_eq!(ElectionType::from_wire(1), Some(ElectionType::Unclean));
        assert_eq!(ElectionType::from_wire(2), None);
        assert_eq!(ElectionType::from_wire(-1), None);
    }

    #[test]
    fn rebalance_moves_leadership_back_above_the_imbalance_percentage() {
        // 10 partitions: broker 1 prefers 0, 3, 6, 9. Broker 2 leads 0 and 3 (ISR full).
        let image = cluster(10);
        let image = set(&image, 0, 2, &[1, 2, 3]);
        let image = set(&image, 3, 2, &[1, 2, 3]);
        // 2 of 4 = 50 %: above 10 %, both move back; at 50 % nothing does.
        let records = leader_rebalance_records(&image, 10, LEADER_REBALANCE_ELECTIONS_MAX);
        assert_eq!(records.len(), 2);
        let after = apply(&image, &records);
        assert_eq!((part(&after, 0).leader, part(&after, 3).leader), (1, 1));
        assert_eq!(
            part(&after, 0).leader_epoch,
            part(&image, 0).leader_epoch + 1
        );
        assert!(leader_rebalance_records(&image, 50, 1000).is_empty());
        assert!(leader_rebalance_records(&after, 0, 1000).is_empty());
        // The bound per round.
        assert_eq!(leader_rebalance_records(&image, 10, 1).len(), 1);
    }

    #[test]
    fn rebalance_skips_preferred_replicas_out_of_the_isr_or_fenced() {
        let image = cluster(3);
        // Partition 0 (prefers 1) led by 2 while 1 is out of the ISR.
        let image = set(&image, 0, 2, &[2, 3]);
        assert!(leader_rebalance_records(&image, 0, 1000).is_empty());
        // Back in the ISR, but fenced.
        let image = set(&image, 0, 2, &[2, 3, 1]);
        let fenced = apply(&image, &[Record::BrokerFenced { broker_id: 1 }]);
        assert!(leader_rebalance_records(&fenced, 0, 1000).is_empty());
        let records = leader_rebalance_records(&image, 0, 1000);
        assert_eq!(records.len(), 1);
        assert_eq!(part(&apply(&image, &records), 0).leader, 1);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::partition_change::{alter_partitions, AlterPartitionRequest, IsrMember};

        const PARTITIONS: i32 = 6;

        #[derive(Clone, Debug)]
        enum Op {
            Fence(i32),
            Unfence(i32),
            /// The leader of a partition drops one follower from the ISR.
            Shrink(i32, usize),
            /// The leader of a partition takes a live replica back into the ISR.
            Expand(i32, i32),
            Elect(ElectionType, Vec<i32>),
            ElectAll(ElectionType),
            Rebalance(u32),
        }

        fn op() -> impl Strategy<Value = Op> {
            let broker = || 1..=3i32;
            let p = || 0..PARTITIONS;
            let election = prop_oneof![Just(ElectionType::Preferred), Just(ElectionType::Unclean)];
            prop_oneof![
                2 => broker().prop_map(Op::Fence),
                2 => broker().prop_map(Op::Unfence),
                2 => (p(), 0..3usize).prop_map(|(p, m)| Op::Shrink(p, m)),
                2 => (p(), broker()).prop_map(|(p, b)| Op::Expand(p, b)),
                3 => (election.clone(), proptest::collection::vec(p(), 1..4))
                    .prop_map(|(e, ps)| Op::Elect(e, ps)),
                1 => election.prop_map(Op::ElectAll),
                2 => (0..=100u32).prop_map(Op::Rebalance),
            ]
        }

        fn alter(image: &Arc<ClusterImage>, p: i32, isr: Vec<i32>) -> Vec<Record> {
            let part = part(image, p as usize);
            let request = AlterPartitionRequest {
                topic_id: TOPIC,
                partition: p,
                leader_id: part.leader,
                leader_epoch: part.leader_epoch,
                partition_epoch: part.partition_epoch,
                new_isr: isr
                    .iter()
                    .map(|b| IsrMember {
                        broker_id: *b,
                        broker_epoch: image.brokers[b].broker_epoch,
                    })
                    .collect(),
            };
            alter_partitions(image, &[request]).1
        }

        /// The records `op` makes on `image`, and the leaders elected by ElectLeaders or the
        /// rebalance (the only elections whose rules this module owns).
        fn records_of(image: &Arc<ClusterImage>, op: &Op) -> (Vec<Record>, Option<ElectionType>) {
            let live = |b: i32| !image.brokers[&b].fenced;
            match op {
                Op::Fence(b) if live(*b) => (fence_records(image, *b, Unclean::Disabled), None),
                Op::Unfence(b) if !live(*b) => {
                    (unfence_records(image, *b, Unclean::Disabled), None)
                }
                Op::Shrink(p, m) => {
                    let part = part(image, *p as usize);
                    let Some(&member) = part.isr.get(*m) else {
                        return (Vec::new(), None);
                    };
                    if part.leader == -1 || member == part.leader {
                        return (Vec::new(), None);
                    }
                    let isr = part.isr.iter().copied().filter(|r| *r != member).collect();
                    (alter(image, *p, isr), None)
                }
                Op::Expand(p, b) => {
                    let part = part(image, *p as usize);
                    if part.leader == -1 || part.isr.contains(b) || !live(*b) {
                        return (Vec::new(), None);
                    }
                    let mut isr = part.isr.clone();
                    isr.push(*b);
                    (alter(image, *p, isr), None)
                }
                Op::Elect(e, ps) => {
                    let (_, records) = elect_leaders(image, &request(*e, &[("t", ps)]));
                    (records, Some(*e))
                }
                Op::ElectAll(e) => {
                    let all = ElectLeadersRequest {
                        election_type: *e,
                        topics: None,
                    };
                    (elect_leaders(image, &all).1, Some(*e))
                }
                Op::Rebalance(pct) => (
                    leader_rebalance_records(image, *pct, LEADER_REBALANCE_ELECTIONS_MAX),
                    Some(ElectionType::Preferred),
                ),
                _ => (Vec::new(), None),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            /// Every election made here is accepted by the image's checks, elects a live
            /// replica, and (preferred) one from the ISR (or the ELR of an empty ISR), so it
            /// holds every committed record; a preferred election keeps the ISR; the rebalance
            /// only elects preferred replicas.
            #[test]
            fn elections_elect_live_in_sync_replicas(ops in proptest::collection::vec(op(), 1..40)) {
                let mut image = cluster(PARTITIONS);
                for op in &ops {
                    let (records, election) = records_of(&image, op);
                    if records.is_empty() {
                        continue;
                    }
                    let next = apply(&image, &records);
                    if let Some(election) = election {
                        for p in 0..PARTITIONS as usize {
                            let (old, new) = (part(&image, p), part(&next, p));
                            if old == new {
                                continue;
                            }
                            prop_assert!(new.leader != old.leader, "{old:?} -> {new:?}");
                            prop_assert!(!next.brokers[&new.leader].fenced);
                            prop_assert_eq!(new.leader_epoch, old.leader_epoch + 1);
                            match election {
                                ElectionType::Preferred => {
                                    let eligible = if old.isr.is_empty() { &old.elr } else { &old.isr };
                                    prop_assert!(eligible.contains(&new.leader), "{old:?} -> {new:?}");
                                    if !old.isr.is_empty() {
                                        prop_assert_eq!(&new.isr, &old.isr);
                                    }
                                    if matches!(op, Op::Rebalance(_)) {
                                        prop_assert_eq!(new.leader, new.replicas[0]);
                                    }
                                }
                                ElectionType::Unclean => {
                                    prop_assert_eq!(old.leader, -1);
                                }
                            }
                        }
                    }
                    image = next;
                }
            }
        }
    }
}
