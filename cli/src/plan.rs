//! Reassignment plans as plain values, and the pure decisions behind `keel topic reassign` and
//! `keel cluster decommission`: Kafka's plan file (kafka-reassign-partitions.sh's
//! `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}`), a proposed
//! placement over chosen brokers (`propose`), a plan that drains one broker (`drain`), and how a
//! partition stands against its plan (`standing`). No I/O here: the commands fetch Metadata
//! and ListPartitionReassignments, call these, and send what they return.
//!
//! Invariants every plan keeps (checked when one is read, and held by what is built here):
//! each (topic, partition) appears once, each replica list is non-empty and names a broker
//! once.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

/// One partition's target replicas, the first being the preferred leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// Kafka's reassignment plan: partitions and their target replicas, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub partitions: Vec<Assignment>,
}

/// Config changes of one resource: (Kafka's resource type, name, [(config, op, value)] with
/// op 0 SET, 1 DELETE).
pub type ConfigOps = (i8, String, Vec<(String, i8, Option<String>)>);

/// Kafka's resource types for configs.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const LEADER_RATE: &str = "leader.replication.throttled.rate";
const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// The config changes that throttle `plan`'s copy at `rate` bytes/s, as
/// kafka-reassign-partitions.sh `--throttle` makes them: both rates on every broker involved,
/// and per topic the leader throttle on the current replicas of each moving partition and the
/// follower throttle on the replicas it adds. `current`: each partition's replicas now.
pub fn throttle_configs(current: &Plan, plan: &Plan, rate: i64) -> Vec<ConfigOps> {
    let mut brokers: BTreeSet<i32> = BTreeSet::new();
    let mut topics: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for a in &plan.partitions {
        let now: Vec<i32> = current
            .partitions
            .iter()
            .find(|c| c.topic == a.topic && c.partition == a.partition)
            .map(|c| c.replicas.clone())
            .unwrap_or_default();
        if now == a.replicas {
            continue;
        }
        let lists = topics.entry(a.topic.clone()).or_default();
        for b in &now {
            lists.0.push(format!("{}:{b}", a.partition));
        }
        for b in a.replicas.iter().filter(|b| !now.contains(b)) {
            lists.1.push(format!("{}:{b}", a.partition));
        }
        brokers.extend(now.iter().chain(&a.replicas));
    }
    let set = |k: &str, v: String| (k.to_string(), 0i8, Some(v));
    let mut out: Vec<ConfigOps> = brokers
        .into_iter()
        .map(|b| {
            (
                RESOURCE_BROKER,
                b.to_string(),
                vec![
                    set(LEADER_RATE, rate.to_string()),
                    set(FOLLOWER_RATE, rate.to_string()),
                ],
            )
        })
        .collect();
    for (topic, (leaders, followers)) in topics {
        let mut ops = vec![set(LEADER_REPLICAS, leaders.join(","))];
        if !followers.is_empty() {
            ops.push(set(FOLLOWER_REPLICAS, followers.join(",")));
        }
        out.push((RESOURCE_TOPIC, topic, ops));
    }
    out
}

/// The config changes that remove the throttles again: both rates on `brokers`, both lists on
/// the plan's topics (Kafka's `--verify` clears them once the plan is complete).
pub fn unthrottle_configs(brokers: &[i32], plan: &Plan) -> Vec<ConfigOps> {
    let delete = |k: &str| (k.to_string(), 1i8, None);
    let topics: BTreeSet<&str> = plan.partitions.iter().map(|a| a.topic.as_str()).collect();
    brokers
        .iter()
        .map(|b| {
            (
                RESOURCE_BROKER,
                b.to_string(),
                vec![delete(LEADER_RATE), delete(FOLLOWER_RATE)],
            )
        })
        .chain(topics.into_iter().map(|t| {
            (
                RESOURCE_TOPIC,
                t.to_string(),
                vec![delete(LEADER_REPLICAS), delete(FOLLOWER_REPLICAS)],
            )
        }))
        .collect()
}

/// Why a plan file was refused, in words for the operator.
pub type PlanError = String;

impl Plan {
    /// Reads a plan file as kafka-reassign-partitions.sh writes and reads it. `log_dirs` is
    /// accepted when every entry is "any" (Keel has one log directory per broker).
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match doc.get("version").and_then(Value::as_i64) {
            Some(1) => {}
            Some(v) => return Err(format!("version {v} is not supported (only 1)")),
            None => return Err("no \"version\": 1".into()),
        }
        let entries = doc
            .get("partitions")
            .and_then(Value::as_array)
            .ok_or("no \"partitions\" list")?;
        let mut plan = Plan::default();
        let mut seen = BTreeSet::new();
        for (i, e) in entries.iter().enumerate() {
            let a = assignment(e).map_err(|why| format!("partitions[{i}]: {why}"))?;
            if !seen.insert((a.topic.clone(), a.partition)) {
                return Err(format!(
                    "{}-{} is listed twice (a plan names each partition once)",
                    a.topic, a.partition
                ));
            }
            plan.partitions.push(a);
        }
        if plan.partitions.is_empty() {
            return Err("the plan lists no partitions".into());
        }
        Ok(plan)
    }

    /// The plan as Kafka's tools write it (with `log_dirs` all "any", as they do).
    pub fn to_json(&self) -> Value {
        let partitions: Vec<Value> = self
            .partitions
            .iter()
            .map(|a| {
                json!({
                    "topic": a.topic,
                    "partition": a.partition,
                    "replicas": a.replicas,
                    "log_dirs": vec!["any"; a.replicas.len()],
                })
            })
            .collect();
        json!({ "version": 1, "partitions": partitions })
    }

    /// The plan on one line, as kafka-reassign-partitions.sh prints it (its key order, which
    /// `to_json`'s map does not keep).
    pub fn to_text(&self) -> String {
        let partitions: Vec<String> = self
            .partitions
            .iter()
            .map(|a| {
                let topic = serde_json::to_string(&a.topic).expect("a string serializes");
                let replicas: Vec<String> = a.replicas.iter().map(i32::to_string).collect();
                format!(
                    "{{\"topic\":{topic},\"partition\":{},\"replicas\":[{}],\"log_dirs\":[{}]}}",
                    a.partition,
                    replicas.join(","),
                    vec!["\"any\""; a.replicas.len()].join(",")
                )
            })
            .collect();
        format!(
            "{{\"version\":1,\"partitions\":[{}]}}",
            partitions.join(",")
        )
    }
}

fn assignment(e: &Value) -> Result<Assignment, String> {
    let topic = e
        .get("topic")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("no \"topic\"")?;
    let partition = e
        .get("partition")
        .and_then(Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p >= 0)
        .ok_or("no \"partition\" (a number from 0)")?;
    let replicas: Vec<i32> = e
        .get("replicas")
        .and_then(Value::as_array)
        .ok_or("no \"replicas\" list")?
        .iter()
        .map(|r| r.as_i64().and_then(|r| i32::try_from(r).ok()))
        .collect::<Option<_>>()
        .ok_or("\"replicas\" must be broker ids")?;
    if replicas.is_empty() {
        return Err(format!("{topic}-{partition}: the replica list is empty"));
    }
    if let Some(dup) = first_duplicate(&replicas) {
        return Err(format!("{topic}-{partition}: broker {dup} is listed twice"));
    }
    if let Some(dirs) = e.get("log_dirs") {
        let dirs = dirs.as_array().ok_or("\"log_dirs\" must be a list")?;
        if dirs.len() != replicas.len() {
            return Err(format!(
                "{topic}-{partition}: \"log_dirs\" has {} entries for {} replicas",
                dirs.len(),
                replicas.len()
            ));
        }
        if dirs.iter().any(|d| d.as_str() != Some("any")) {
            return Err(format!(
                "{topic}-{partition}: only \"any\" log directories are supported"
            ));
        }
    }
    Ok(Assignment {
        topic: topic.to_string(),
        partition,
        replicas,
    })
}

fn first_duplicate(ids: &[i32]) -> Option<i32> {
    ids.iter()
        .enumerate()
        .find(|(i, id)| ids[..*i].contains(id))
        .map(|(_, id)| *id)
}

/// A broker as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: i32,
    pub rack: Option<String>,
}

/// Brokers in the broker's own placement order (`controller::place_replicas`): the first
/// broker of each rack, then the second of each, ..., so consecutive brokers alternate racks.
fn rack_alternating(nodes: &[Node]) -> Vec<i32> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for n in nodes {
        by_rack.entry(n.rack.as_deref()).or_default().push(n.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let depth = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..depth)
        .flat_map(|i| by_rack.values().filter_map(move |ids| ids.get(i).copied()))
        .collect()
}

/// A proposed placement of every partition of `topics` (name, partition count, replication
/// factor) over `nodes`, as Keel places a new topic's partitions: each partition's leader is
/// the broker leading the fewest partitions of the plan so far, its followers the next brokers
/// in rack-alternating order. `replication_factor` overrides each topic's own.
pub fn propose(
    topics: &[(String, i32, usize)],
    nodes: &[Node],
    replication_factor: Option<usize>,
) -> Result<Plan, PlanError> {
    let order = rack_alternating(nodes);
    if order.is_empty() {
        return Err("no brokers to place replicas on".into());
    }
    let mut led = vec![0usize; order.len()];
    let mut plan = Plan::default();
    for (topic, count, rf) in topics {
        let rf = replication_factor.unwrap_or(*rf);
        if rf == 0 || rf > order.len() {
            return Err(format!(
                "{topic}: a replication factor of {rf} needs {rf} brokers, and {} are listed",
                order.len()
            ));
        }
        for partition in 0..*count {
            let pos = (0..order.len())
                .min_by_key(|&i| (led[i], i))
                .expect("order is not empty");
            led[pos] += 1;
            plan.partitions.push(Assignment {
                topic: topic.clone(),
                partition,
                replicas: (0..rf).map(|k| order[(pos + k) % order.len()]).collect(),
            });
        }
    }
    Ok(plan)
}

/// One partition moved off a broker: its target replicas now (`from`) and the plan's (`to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub partition: i32,
    pub from: Vec<i32>,
    pub to: Vec<i32>,
}

/// The moves that take every replica off `broker`. `partitions` are every partition's
/// target replicas (a partition being reassigned counts by its target), `live` the brokers
/// that may take replicas. Each replica on `broker` is replaced, in its place in the list (so
/// a partition keeps its preferred leader unless that was `broker`), by a live broker that is
/// not a replica of the partition yet: first one whose rack none of the partition's other
/// replicas has, then the one holding the fewest replicas (counting the moves already
/// planned), then the lowest id. The replica count never changes. Refused whole, naming each
/// partition, when some partition has no such broker.
pub fn drain(
    partitions: &[Assignment],
    live: &[Node],
    broker: i32,
) -> Result<Vec<Move>, PlanError> {
    let rack: BTreeMap<i32, Option<&str>> =
        live.iter().map(|n| (n.id, n.rack.as_deref())).collect();
    let mut load: BTreeMap<i32, usize> = live
        .iter()
        .filter(|n| n.id != broker)
        .map(|n| (n.id, 0))
        .collect();
    for a in partitions {
        for r in &a.replicas {
            if let Some(n) = load.get_mut(r) {
                *n += 1;
            }
        }
    }
    let mut moves = Vec::new();
    let mut stuck = Vec::new();
    for a in partitions.iter().filter(|a| a.replicas.contains(&broker)) {
        let others: Vec<i32> = a
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != broker)
            .collect();
        let used_racks: BTreeSet<Option<&str>> = others
            .iter()
            .filter_map(|r| rack.get(r).copied().flatten())
            .map(Some)
            .collect();
        let choice = load
            .iter()
            .filter(|(id, _)| !a.replicas.contains(id))
            .min_by_key(|(id, n)| {
                let rack_taken = rack
                    .get(id)
                    .copied()
                    .flatten()
                    .is_some_and(|r| used_racks.contains(&Some(r)));
                (rack_taken, **n, **id)
            })
            .map(|(id, _)| *id);
        let Some(new) = choice else {
            stuck.push(format!(
                "{}-{} (replicas {})",
                a.topic,
                a.partition,
                ids_text(&a.replicas)
            ));
            continue;
        };
        *load.get_mut(&new).expect("chosen from the load map") += 1;
        let to = a
            .replicas
            .iter()
            .map(|r| if *r == broker { new } else { *r })
            .collect();
        moves.push(Move {
            topic: a.topic.clone(),
            partition: a.partition,
            from: a.replicas.clone(),
            to,
        });
    }
    if !stuck.is_empty() {
        let others: Vec<i32> = load.keys().copied().collect();
        return Err(format!(
            "not enough brokers to move every replica off broker {broker}: the live brokers \
             other than {broker} are [{}], and each of these partitions already has a replica \
             on all of them: {}",
            ids_text(&others),
            stuck.join(", ")
        ));
    }
    Ok(moves)
}

fn ids_text(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// How a partition stands against its plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Its replicas are the plan's, in order, and no reassignment is in progress.
    Complete,
    /// A reassignment is in progress: replicas being added and removed.
    InProgress {
        adding: Vec<i32>,
        removing: Vec<i32>,
    },
    /// No reassignment in progress, and its replicas are not the plan's.
    Different,
    /// The topic or partition does not exist.
    Unknown,
}

/// Where a partition with `replicas` (Metadata's list; None: no such partition) and a
/// reassignment in progress or not (`ongoing`: adding, removing) stands against `planned`.
pub fn standing(
    planned: &[i32],
    replicas: Option<&[i32]>,
    ongoing: Option<(&[i32], &[i32])>,
) -> Standing {
    match (replicas, ongoing) {
        (None, _) => Standing::Unknown,
        (Some(_), Some((adding, removing))) => Standing::InProgress {
            adding: adding.to_vec(),
            removing: removing.to_vec(),
        },
        (Some(r), None) if r == planned => Standing::Complete,
        (Some(_), None) => Standing::Different,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: i32, rack: Option<&str>) -> Node {
        Node {
            id,
            rack: rack.map(String::from),
        }
    }

    fn a(topic: &str, partition: i32, replicas: &[i32]) -> Assignment {
        Assignment {
            topic: topic.into(),
            partition,
            replicas: replicas.to_vec(),
        }
    }

    #[test]
    fn a_plan_reads_what_kafka_writes_and_writes_it_back() {
        let text = r#"{"version":1,"partitions":[
            {"topic":"t","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},
            {"topic":"u","partition":2,"replicas":[3]}]}"#;
        let plan = Plan::parse(text).unwrap();
        assert_eq!(
            plan.partitions,
            vec![a("t", 0, &[1, 2, 3]), a("u", 2, &[3])]
        );
        assert_eq!(
            plan.to_text(),
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},{"topic":"u","partition":2,"replicas":[3],"log_dirs":["any"]}]}"#
        );
        assert_eq!(Plan::parse(&plan.to_text()).unwrap(), plan);
        assert_eq!(Plan::parse(&plan.to_json().to_string()).unwrap(), plan);
        let quoted = Plan {
            partitions: vec![a("a\"b", 0, &[1])],
        };
        assert_eq!(Plan::parse(&quoted.to_text()).unwrap(), quoted);
    }

    #[test]
    fn bad_plans_are_refused_with_the_reason() {
        let bad = [
            ("[]", "no \"version\": 1"),
            (
                r#"{"version":2,"partitions":[]}"#,
                "version 2 is not supported",
            ),
            (r#"{"version":1}"#, "no \"partitions\" list"),
            (r#"{"version":1,"partitions":[]}"#, "lists no partitions"),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}"#,
                "t-0: the replica list is empty",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}"#,
                "broker 1 is listed twice",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
                "t-0 is listed twice",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}"#,
                "no \"partition\"",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":["x"]}]}"#,
                "must be broker ids",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}"#,
                "only \"any\" log directories",
            ),
            ("{", "not JSON"),
        ];
        for (text, why) in bad {
            let err = Plan::parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn proposals_spread_leaders_and_alternate_racks() {
        let nodes = [
            node(1, Some("a")),
            node(2, Some("a")),
            node(3, Some("b")),
            node(4, Some("b")),
        ];
        let topics = [("t".to_string(), 4, 2), ("u".to_string(), 2, 1)];
        let plan = propose(&topics, &nodes, None).unwrap();
        let replicas: Vec<Vec<i32>> = plan.partitions.iter().map(|a| a.replicas.clone()).collect();
        // Order 1,3,2,4: each partition's two replicas are in different racks, leaders spread
        // over all four, and the next topic goes on where the first stopped.
        assert_eq!(
            replicas,
            vec![
                vec![1, 3],
                vec![3, 2],
                vec![2, 4],
                vec![4, 1],
                vec![1],
                vec![3]
            ]
        );
        let rf3 = propose(&topics[..1], &nodes, Some(3)).unwrap();
        assert!(rf3.partitions.iter().all(|a| a.replicas.len() == 3));
        let err = propose(&topics, &nodes, Some(5)).unwrap_err();
        assert!(err.contains("needs 5 brokers, and 4 are listed"), "{err}");
        assert!(propose(&topics, &[], None).is_err());
    }

    #[test]
    fn draining_keeps_positions_and_picks_the_least_loaded_free_broker() {
        let live = [node(1, None), node(2, None), node(3, None), node(4, None)];
        let parts = [
            a("t", 0, &[3, 1]),
            a("t", 1, &[1, 3]),
            a("t", 2, &[2, 4]),
            a("u", 0, &[4, 2, 3]),
        ];
        let moves = drain(&parts, &live, 3).unwrap();
        // Loads before: 1, 2 and 4 hold two replicas each. t-0 (1 is a replica): 2 and 4 tie,
        // 2 by id. t-1: 2 now holds three, 4 two: 4. u-0: 1 is the only free one.
        assert_eq!(
            moves,
            vec![
                Move {
                    topic: "t".into(),
                    partition: 0,
                    from: vec![3, 1],
                    to: vec![2, 1]
                },
                Move {
                    topic: "t".into(),
                    partition: 1,
                    from: vec![1, 3],
                    to: vec![1, 4]
                },
                Move {
                    topic: "u".into(),
                    partition: 0,
                    from: vec![4, 2, 3],
                    to: vec![4, 2, 1]
                },
            ]
        );
        assert_eq!(drain(&parts, &live, 5).unwrap(), vec![]);
    }

    #[test]
    fn draining_prefers_a_rack_the_partition_lacks() {
        let live = [
            node(1, Some("a")),
            node(2, Some("a")),
            node(3, Some("b")),
            node(4, Some("b")),
        ];
        // Replicas 1 (a) and 3 (b); 3 leaves: 4 (b) keeps both racks although 2 is lighter.
        let parts = [a("t", 0, &[1, 3]), a("x", 0, &[4]), a("x", 1, &[4])];
        let moves = drain(&parts, &live, 3).unwrap();
        assert_eq!(moves[0].to, vec![1, 4]);
    }

    #[test]
    fn draining_refuses_when_a_partition_has_nowhere_to_go() {
        let live = [node(1, None), node(2, None), node(3, None)];
        let parts = [a("t", 0, &[1, 2, 3]), a("t", 1, &[3])];
        let err = drain(&parts, &live, 3).unwrap_err();
        assert!(err.contains("live brokers other than 3 are [1,2]"), "{err}");
        assert!(err.contains("t-0 (replicas 1,2,3)"), "{err}");
        assert!(!err.contains("t-1"), "{err}");
    }

    #[test]
    fn standing_against_a_plan() {
        assert_eq!(standing(&[1, 2], Some(&[1, 2]), None), Standing::Complete);
        assert_eq!(standing(&[1, 2], Some(&[2, 1]), None), Standing::Different);
        assert_eq!(standing(&[1, 2], None, None), Standing::Unknown);
        assert_eq!(
            standing(&[1, 2], Some(&[1, 2, 3]), Some((&[2], &[3]))),
            Standing::InProgress {
                adding: vec![2],
                removing: vec![3]
            }
        );
    }

    #[test]
    fn throttle_configs_are_kafkas_lists() {
        let a = |p: i32, r: &[i32]| Assignment {
            topic: "t".into(),
            partition: p,
            replicas: r.to_vec(),
        };
        let current = Plan {
            partitions: vec![a(0, &[1]), a(1, &[2, 3])],
        };
        let plan = Plan {
            partitions: vec![a(0, &[1, 2]), a(1, &[2, 3])],
        };
        let changes = throttle_configs(&current, &plan, 100);
        // Partition 1 does not move: only brokers 1 and 2 are involved.
        let brokers: Vec<&str> = changes
            .iter()
            .filter(|c| c.0 == RESOURCE_BROKER)
            .map(|c| c.1.as_str())
            .collect();
        assert_eq!(brokers, vec!["1", "2"]);
        let topic = changes.iter().find(|c| c.0 == RESOURCE_TOPIC).unwrap();
        assert_eq!(
            topic.2,
            vec![
                (LEADER_REPLICAS.to_string(), 0, Some("0:1".to_string())),
                (FOLLOWER_REPLICAS.to_string(), 0, Some("0:2".to_string())),
            ]
        );
        let undo = unthrottle_configs(&[1, 2, 3], &plan);
        assert_eq!(undo.len(), 4);
        assert!(undo
            .iter()
            .all(|c| c.2.iter().all(|(_, op, v)| *op == 1 && v.is_none())));
    }
}
