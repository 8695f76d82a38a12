//! The server-side assignors of KIP-848 consumer groups (Kafka's `UniformAssignor` and
//! `RangeAssignor`): given the members' resolved subscriptions, their previous targets and the
//! topics' partition counts, the group's next target assignment. Pure and deterministic.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use keel_vocab::{TopicId, TopicIdPartition};

/// The topics the group can see, passed on every heartbeat: name → (topic id, partition count).
/// The coordinator passes user-visible topics; internal ones are never matched by a regex.
pub type TopicsView = BTreeMap<String, (TopicId, i32)>;

type PartitionSet = BTreeSet<TopicIdPartition>;

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

/// What an assignor knows of a member.
pub struct Subscription<'a> {
    pub member_id: &'a str,
    /// Existing topics only (resolved).
    pub topics: &'a BTreeSet<String>,
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
pub fn assign(
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

#[cfg(test)]
#[path = "assignor_tests.rs"]
mod tests;
