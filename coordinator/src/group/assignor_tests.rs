use super::*;
use crate::testing::{set, topic_id, view, PartitionSet, Rng};

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
