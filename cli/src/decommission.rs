//! `keel cluster decommission BROKER [--wait-secs N] [--unregister]`: drains a broker of
//! every replica it holds (internal topics included), then optionally removes its
//! registration. The plan is `plan::drain` over Metadata's live brokers and each partition's
//! target replicas (a partition already being reassigned counts by its target, from
//! ListPartitionReassignments); it is refused whole before anything changes when some
//! partition has no broker to go to. The moves are sent as one AlterPartitionReassignments,
//! then Metadata and ListPartitionReassignments are polled until nothing is in progress and
//! the broker holds nothing, or `--wait-secs` pass. UnregisterBroker is sent only when the
//! broker holds nothing and no longer runs: a running broker would register again at its next
//! heartbeat.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args::{self, Spec};
use crate::client::{Client, ClusterInfo, OngoingByPartition};
use crate::error::{error_name, CliError, Result};
use crate::plan::{self, Assignment, Move, Node, Standing};
use crate::reassign::{ongoing, progress_word, replicas_of};
use crate::table::{ids, Table};
use crate::{connect, emit, emit_json};

/// How long to wait for the moves by default.
const WAIT_SECS_DEFAULT: u64 = 300;
/// How often the moves' progress is read.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

pub const USAGE: &str = "  keel cluster decommission BROKER [--wait-secs N] [--unregister]
                         moves every replica off BROKER (each replaced, in its place, by a
                         live broker that is not yet a replica of the partition, least loaded
                         first), waits until done (default 300 s; 0: does not wait) and
                         reports each partition; --unregister then removes the broker's
                         registration once it holds nothing and has been stopped
";

pub fn run(rest: &[String], out: &mut dyn Write) -> Result<i32> {
    let p = args::parse(
        rest,
        &Spec {
            values: &["--wait-secs"],
            switches: &["--unregister"],
        },
    )?;
    if p.has("--help") {
        emit(out, &format!("usage:\n{USAGE}{}", crate::COMMON_OPTIONS))?;
        return Ok(0);
    }
    let broker: i32 = match p.positionals.as_slice() {
        [one] => one
            .parse()
            .map_err(|_| CliError::Usage(format!("BROKER must be a broker id, got {one:?}")))?,
        _ => return Err(CliError::Usage("exactly one BROKER id is needed".into())),
    };
    let wait = Duration::from_secs(p.number::<u64>("--wait-secs")?.unwrap_or(WAIT_SECS_DEFAULT));
    let mut client = connect(&p)?;
    let report = decommission(&mut client, broker, wait, p.has("--unregister"))?;
    if p.json() {
        emit_json(out, &report.to_json())?;
    } else {
        emit(out, &report.to_text())?;
    }
    Ok(if report.succeeded() { 0 } else { 1 })
}

/// Each partition's target replicas: Metadata's list less the replicas a reassignment in
/// progress is removing.
fn targets(meta: &ClusterInfo, ongoing: &OngoingByPartition) -> Vec<Assignment> {
    meta.topics
        .iter()
        .filter(|t| t.error_code == 0)
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let removing = ongoing
                    .get(&(t.name.clone(), p.partition))
                    .map(|o| o.removing.as_slice())
                    .unwrap_or_default();
                Assignment {
                    topic: t.name.clone(),
                    partition: p.partition,
                    replicas: p
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| !removing.contains(r))
                        .collect(),
                }
            })
        })
        .collect()
}

/// Partitions whose replicas (Metadata's list, removing ones included) name `broker`.
fn left_on(meta: &ClusterInfo, broker: i32) -> Vec<Assignment> {
    meta.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.replicas.contains(&broker))
                .map(|p| Assignment {
                    topic: t.name.clone(),
                    partition: p.partition,
                    replicas: p.replicas.clone(),
                })
        })
        .collect()
}

/// One planned move and how it ended.
struct Outcome {
    moved: Move,
    /// The refusal of AlterPartitionReassignments, if it refused.
    refused: Option<(i16, Option<String>)>,
    progress: Standing,
}

impl Outcome {
    fn status(&self) -> String {
        match &self.refused {
            Some((code, _)) => error_name(*code),
            None if self.progress == Standing::Complete => "moved".into(),
            None => progress_word(&self.progress),
        }
    }
}

/// What `--unregister` did.
enum Unregister {
    NotAsked,
    NotSent(String),
    Sent(i16, Option<String>),
}

struct Report {
    broker: i32,
    outcomes: Vec<Outcome>,
    /// Partitions that still name the broker at the end.
    left: Vec<Assignment>,
    /// Whether Metadata listed the broker at the end (it runs, unfenced).
    listed: bool,
    unregister: Unregister,
}

fn decommission(
    client: &mut Client,
    broker: i32,
    wait: Duration,
    unregister: bool,
) -> Result<Report> {
    let meta = client.metadata(None)?;
    let ongoing_now = ongoing(client)?;
    let live: Vec<Node> = meta
        .brokers
        .iter()
        .map(|b| Node {
            id: b.id,
            rack: b.rack.clone(),
        })
        .collect();
    let moves =
        plan::drain(&targets(&meta, &ongoing_now), &live, broker).map_err(CliError::Failed)?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    if !moves.is_empty() {
        let asked: Vec<(String, i32, Option<Vec<i32>>)> = moves
            .iter()
            .map(|m| (m.topic.clone(), m.partition, Some(m.to.clone())))
            .collect();
        let results = client.alter_reassignments(&asked)?;
        for (m, r) in moves.into_iter().zip(results) {
            outcomes.push(Outcome {
                moved: m,
                refused: (r.error_code != 0).then_some((r.error_code, r.error_message)),
                progress: Standing::InProgress {
                    adding: Vec::new(),
                    removing: Vec::new(),
                },
            });
        }
    }
    let deadline = Instant::now() + wait;
    let meta = loop {
        let meta = client.metadata(None)?;
        let ongoing_now = ongoing(client)?;
        for o in outcomes.iter_mut().filter(|o| o.refused.is_none()) {
            let (topic, partition) = (&o.moved.topic, o.moved.partition);
            let current = ongoing_now.get(&(topic.clone(), partition));
            o.progress = plan::standing(
                &o.moved.to,
                replicas_of(&meta, topic, partition),
                current.map(|c| (c.adding.as_slice(), c.removing.as_slice())),
            );
        }
        let moving = outcomes
            .iter()
            .any(|o| matches!(o.progress, Standing::InProgress { .. }) && o.refused.is_none());
        // Partitions reassigned by someone else that are still taking replicas off the broker.
        let others_moving = left_on(&meta, broker)
            .iter()
            .any(|a| ongoing_now.contains_key(&(a.topic.clone(), a.partition)));
        // Metadata comes from a broker's image, ListPartitionReassignments from the
        // controller's: a broker a moment behind still shows a finished move's replicas with
        // the removed ones (the target and more) after the controller no longer lists it.
        // That is a move finishing, not a different assignment: look again.
        let settling = outcomes.iter().any(|o| {
            o.refused.is_none()
                && o.progress == Standing::Different
                && replicas_of(&meta, &o.moved.topic, o.moved.partition)
                    .is_some_and(|r| o.moved.to.iter().all(|b| r.contains(b)))
        });
        if (!moving && !others_moving && !settling) || Instant::now() >= deadline {
            break meta;
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    let left = left_on(&meta, broker);
    let listed = meta.brokers.iter().any(|b| b.id == broker);
    let all_moved = outcomes
        .iter()
        .all(|o| o.refused.is_none() && o.progress == Standing::Complete);
    let unregister = if !unregister {
        Unregister::NotAsked
    } else if !left.is_empty() || !all_moved {
        Unregister::NotSent(format!(
            "broker {broker} still holds replicas; run the command again once they have moved"
        ))
    } else if listed {
        Unregister::NotSent(format!(
            "broker {broker} is still running and would register again at its next heartbeat: \
             stop it, then run `keel cluster decommission {broker} --unregister`"
        ))
    } else {
        let (code, message) = client.unregister_broker(broker)?;
        Unregister::Sent(code, message)
    };
    Ok(Report {
        broker,
        outcomes,
        left,
        listed,
        unregister,
    })
}

impl Report {
    fn moved(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.refused.is_none() && o.progress == Standing::Complete)
            .count()
    }

    fn succeeded(&self) -> bool {
        self.moved() == self.outcomes.len()
            && self.left.is_empty()
            && matches!(
                self.unregister,
                Unregister::NotAsked | Unregister::Sent(0, _)
            )
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "Moved {} of {} partitions off broker {}.",
            self.moved(),
            self.outcomes.len(),
            self.broker
        );
        if self.left.is_empty() {
            text.push_str(&format!(" Broker {} holds no replicas.", self.broker));
        } else {
            let names: Vec<String> = self
                .left
                .iter()
                .map(|a| format!("{}-{}", a.topic, a.partition))
                .collect();
            text.push_str(&format!(
                " Still on broker {}: {}.",
                self.broker,
                names.join(", ")
            ));
        }
        if !self.listed {
            text.push_str(&format!(
                " Metadata does not list broker {} (stopped, fenced or unknown).",
                self.broker
            ));
        }
        text
    }

    fn unregister_text(&self) -> Option<String> {
        match &self.unregister {
            Unregister::NotAsked => None,
            Unregister::NotSent(why) => Some(format!("Unregister: not sent: {why}.")),
            Unregister::Sent(0, _) => {
                Some(format!("Unregister: broker {} unregistered.", self.broker))
            }
            Unregister::Sent(code, message) => Some(format!(
                "Unregister: {}{}",
                error_name(*code),
                message
                    .as_ref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )),
        }
    }

    fn to_text(&self) -> String {
        let mut text = String::new();
        if !self.outcomes.is_empty() {
            let mut t = Table::new(&[
                "TOPIC",
                "PARTITION",
                "FROM",
                "TO",
                "ADDING",
                "REMOVING",
                "STATUS",
            ]);
            for o in &self.outcomes {
                let (adding, removing) = match &o.progress {
                    Standing::InProgress { adding, removing } if o.refused.is_none() => {
                        (adding.clone(), removing.clone())
                    }
                    _ => (Vec::new(), Vec::new()),
                };
                let show = |v: &[i32]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        ids(v)
                    }
                };
                t.row(vec![
                    o.moved.topic.clone(),
                    o.moved.partition.to_string(),
                    ids(&o.moved.from),
                    ids(&o.moved.to),
                    show(&adding),
                    show(&removing),
                    o.status(),
                ]);
            }
            text.push_str(&t.render());
            text.push('\n');
        }
        text.push_str(&self.summary());
        text.push('\n');
        if let Some(u) = self.unregister_text() {
            text.push_str(&u);
            text.push('\n');
        }
        text
    }

    fn to_json(&self) -> Value {
        let partitions: Vec<Value> = self
            .outcomes
            .iter()
            .map(|o| {
                let (adding, removing) = match &o.progress {
                    Standing::InProgress { adding, removing } if o.refused.is_none() => {
                        (adding.clone(), removing.clone())
                    }
                    _ => (Vec::new(), Vec::new()),
                };
                json!({
                    "topic": o.moved.topic,
                    "partition": o.moved.partition,
                    "from": o.moved.from,
                    "to": o.moved.to,
                    "adding": adding,
                    "removing": removing,
                    "status": o.status(),
                    "error_message": o.refused.as_ref().and_then(|(_, m)| m.clone()),
                })
            })
            .collect();
        let left: Vec<Value> = self
            .left
            .iter()
            .map(|a| json!({ "topic": a.topic, "partition": a.partition, "replicas": a.replicas }))
            .collect();
        let unregister = match &self.unregister {
            Unregister::NotAsked => Value::Null,
            Unregister::NotSent(why) => json!({ "status": "not sent", "error_message": why }),
            Unregister::Sent(code, message) => json!({
                "status": if *code == 0 { "unregistered".to_string() } else { error_name(*code) },
                "error_message": message,
            }),
        };
        json!({
            "broker": self.broker,
            "partitions": partitions,
            "moved": self.moved(),
            "total": self.outcomes.len(),
            "left_on_broker": left,
            "listed_in_metadata": self.listed,
            "done": self.succeeded(),
            "unregister": unregister,
        })
    }
}
