//! The operator's partition moves through the `keel` admin CLI against three real brokers:
//! `keel topic reassign generate|execute|verify|cancel` (Kafka's plan file) growing a topic
//! from one replica to three and moving a topic off a broker, a reassignment stalled by a
//! stopped broker (SIGSTOP) shown by `describe` and `verify` and then cancelled, and
//! `keel cluster decommission` draining a broker (internal topic included) under an
//! idempotent acks=all producer whose every acknowledged record is read back, then
//! unregistering it once stopped. Also CreatePartitions placing new partitions of an RF-3
//! topic on three brokers (automatically and as the request assigns them), which replicate.
//! Every CLI request goes to a running broker.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::client::{topic, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::*;
use serde_json::Value;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `keel ARGS -b BROKER`, with `stdin` fed to it.
fn keel_with_stdin(b: &Broker, args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .args(["-b", &b.bootstrap(), "--request-timeout-ms", "20000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start keel");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "keel {args:?} panicked:\n{}",
        run.stderr
    );
    run
}

fn keel(b: &Broker, args: &[&str]) -> Run {
    keel_with_stdin(b, args, "")
}

/// Runs and expects exit `code`; returns stdout.
fn expect(b: &Broker, args: &[&str], code: i32) -> String {
    let r = keel(b, args);
    assert_eq!(
        r.code, code,
        "keel {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r.stdout
}

/// Runs with `--json`, expects exit `code`, parses stdout.
fn json(b: &Broker, args: &[&str], code: i32) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = expect(b, &args, code);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("keel {args:?}: {e}:\n{text}"))
}

/// A table's rows, as column name -> cell, read by the header's column positions; the table
/// starts at the line beginning with `first_column` and ends at a blank line.
fn table(text: &str, first_column: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines
        .by_ref()
        .find(|l| l.split_whitespace().next() == Some(first_column))
        .unwrap_or_else(|| panic!("no table with column {first_column} in:\n{text}"));
    let mut columns: Vec<(usize, String)> = Vec::new();
    let mut at = 0;
    for name in header.split_whitespace() {
        let start = at + header[at..].find(name).unwrap();
        columns.push((start, name.to_string()));
        at = start + name.len();
    }
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|line| {
            columns
                .iter()
                .enumerate()
                .map(|(i, (start, name))| {
                    let end = columns.get(i + 1).map_or(usize::MAX, |c| c.0);
                    let cell = line.get(*start..end.min(line.len())).unwrap_or("").trim();
                    (name.clone(), cell.to_string())
                })
                .collect()
        })
        .collect()
}

fn ints(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

fn ids_text(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Every partition `b` lists: (topic, partition) -> replicas.
fn assignment(b: &Broker) -> BTreeMap<(String, i32), Vec<i32>> {
    metadata(b)
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.as_ref().unwrap().to_string();
            t.partitions.iter().map(move |p| {
                (
                    (name.clone(), p.partition_index),
                    p.replica_nodes.iter().map(|r| r.0).collect(),
                )
            })
        })
        .collect()
}

/// A config as DescribeConfigs answers it: (value, source). A broker's own configs are asked
/// of that broker (`nodes` holds it).
fn describe_config(b: &Broker, ty: i8, name: &str, key: &str, nodes: &[Broker]) -> (String, i8) {
    let at = if ty == 4 {
        &nodes[index_of(name.parse().unwrap())]
    } else {
        b
    };
    let mut c = Client::connect(&at.bootstrap());
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(ty)
            .with_resource_name(name.to_string().into())
            .with_configuration_keys(Some(vec![key.to_string().into()])),
    ]);
    let resp: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 4, &req);
    let r = &resp.results[0];
    assert_eq!(r.error_code, 0, "{r:?}");
    let c = &r.configs[0];
    (
        c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        c.config_source,
    )
}

/// The reassignments in progress, as `b` lists them: (topic, partition).
fn ongoing_of(b: &Broker) -> Vec<(String, i32)> {
    let mut c = Client::connect(&b.bootstrap());
    let resp: ListPartitionReassignmentsResponse = c.send(
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default(),
    );
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect()
}

fn has_log(b: &Broker, name: &str, p: i32) -> bool {
    b.data_dir().join(format!("{name}-{p}")).exists()
}

fn plan_file(dir: &tempfile::TempDir, name: &str, plan: &Value) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, plan.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Sends `keys` to `name`-`p` with an idempotent acks=all producer and reads them back from
/// the start: every acknowledged key at its offset with its value.
fn produce_and_read_back(nodes: &[Broker], name: &str, p: i32, prefix: &str) {
    let all = bootstrap_all(nodes);
    let reports = Reports::default();
    let producer = producer(&all, &reports);
    send_all(&producer, name, p, &keys(prefix, 20));
    let acked = acked(&reports);
    assert_eq!(acked.len(), 20);
    let last = acked.iter().map(|(_, _, o)| *o).max().unwrap();
    check_acknowledged(&acked, &read_all(&all, name, p, last));
}

fn bootstrap_all(nodes: &[Broker]) -> String {
    nodes
        .iter()
        .filter(|b| b.running())
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn reassign_generate_execute_verify_and_cancel() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    let b1 = &nodes[0];
    let dir = tempfile::tempdir().unwrap();

    // ---- RF 1 -> 3 with generate --replication-factor -------------------------------------
    create(b1, "grow", 2, 1, 1);
    let all = bootstrap_all(&nodes);
    let reports = Reports::default();
    send_all(&producer(&all, &reports), "grow", 0, &keys("g", 30));
    let before = acked(&reports);
    let generated = json(
        b1,
        &[
            "topic",
            "reassign",
            "generate",
            "--topics",
            "grow",
            "--brokers",
            "1,2,3",
            "--replication-factor",
            "3",
        ],
        0,
    );
    let now = assignment(b1);
    for e in generated["current"]["partitions"].as_array().unwrap() {
        let p = e["partition"].as_i64().unwrap() as i32;
        assert_eq!(ints(&e["replicas"]), now[&("grow".to_string(), p)], "{e}");
    }
    let proposed = &generated["proposed"];
    assert_eq!(proposed["version"], 1);
    let entries = proposed["partitions"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{proposed}");
    let mut leaders = Vec::new();
    for e in entries {
        let mut r = ints(&e["replicas"]);
        leaders.push(r[0]);
        r.sort();
        assert_eq!(r, vec![1, 2, 3], "{e}");
    }
    assert_ne!(
        leaders[0], leaders[1],
        "the preferred leaders are spread: {proposed}"
    );
    // The table form prints the same plan as Kafka's tool does, on one line.
    let text = expect(
        b1,
        &[
            "topic",
            "reassign",
            "generate",
            "--topics",
            "grow",
            "--brokers",
            "1,2,3",
            "--replication-factor",
            "3",
        ],
        0,
    );
    assert!(
        text.contains("Proposed partition reassignment configuration\n{\"version\":1,\"partitions\":[{\"topic\":\"grow\",\"partition\":0,"),
        "{text}"
    );
    let grow = plan_file(&dir, "grow.json", proposed);
    // A negative throttle is refused before anything changes.
    let r = keel(
        b1,
        &[
            "topic",
            "reassign",
            "execute",
            "--plan",
            &grow,
            "--throttle",
            "-1",
        ],
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains(">= 0"), "{}", r.stderr);
    assert!(ongoing_of(b1).is_empty());
    let out = expect(
        b1,
        &[
            "topic",
            "reassign",
            "execute",
            "--plan",
            &grow,
            "--throttle",
            "50000000",
        ],
        0,
    );
    assert!(out.starts_with("Throttle set to 50000000 B/s"), "{out}");
    // Kafka's --throttle: both rates on every broker involved (dynamic), the current replicas
    // as leaders and the added ones as followers in the topic's throttled replicas.
    for id in 1..=3 {
        for key in [
            "leader.replication.throttled.rate",
            "follower.replication.throttled.rate",
        ] {
            assert_eq!(
                describe_config(b1, 4, &id.to_string(), key, &nodes),
                ("50000000".to_string(), 2),
                "broker {id} {key}"
            );
        }
    }
    let leaders = describe_config(
        b1,
        2,
        "grow",
        "leader.replication.throttled.replicas",
        &nodes,
    )
    .0;
    let followers = describe_config(
        b1,
        2,
        "grow",
        "follower.replication.throttled.replicas",
        &nodes,
    )
    .0;
    for e in entries {
        let p = e["partition"].as_i64().unwrap() as i32;
        let was = &now[&("grow".to_string(), p)];
        for r in ints(&e["replicas"]) {
            let item = format!("{p}:{r}");
            let listed = if was.contains(&r) {
                &leaders
            } else {
                &followers
            };
            assert!(
                listed.split(',').any(|x| x == item),
                "{item}: {leaders} / {followers}"
            );
        }
    }
    let rows = table(&out, "TOPIC");
    assert_eq!(rows.len(), 2, "{out}");
    for (row, e) in rows.iter().zip(entries) {
        assert_eq!(row["STATUS"], "started", "{out}");
        assert_eq!(row["REPLICAS"], ids_text(&ints(&e["replicas"])), "{out}");
    }
    wait_until(
        "the RF 1 -> 3 plan verifies",
        Duration::from_secs(30),
        || keel(b1, &["topic", "reassign", "verify", "--plan", &grow]).code == 0,
    );
    // verify removed the throttles once the plan was complete.
    assert_eq!(
        describe_config(b1, 4, "2", "leader.replication.throttled.rate", &nodes).1,
        5,
        "back to the default"
    );
    assert_eq!(
        describe_config(
            b1,
            2,
            "grow",
            "follower.replication.throttled.replicas",
            &nodes
        )
        .0,
        ""
    );
    let verified = json(b1, &["topic", "reassign", "verify", "--plan", &grow], 0);
    for (v, e) in verified.as_array().unwrap().iter().zip(entries) {
        assert_eq!(v["status"], "complete", "{v}");
        assert_eq!(v["replicas"], e["replicas"], "{v}");
        assert_eq!((ints(&v["adding"]), ints(&v["removing"])), (vec![], vec![]));
    }
    for p in 0..2 {
        wait_for_full_isr(b1, "grow", p);
    }
    let last = before.iter().map(|(_, _, o)| *o).max().unwrap();
    check_acknowledged(&before, &read_all(&all, "grow", 0, last));

    // ---- a topic moved off broker 3, the plan read from stdin ------------------------------
    create(b1, "off", 3, 2, 1);
    assert!(assignment(b1)
        .iter()
        .any(|((t, _), r)| t == "off" && r.contains(&3)));
    let generated = json(
        b1,
        &[
            "topic",
            "reassign",
            "generate",
            "--topics",
            "off",
            "--brokers",
            "1,2",
        ],
        0,
    );
    let off_plan = generated["proposed"].to_string();
    let run = keel_with_stdin(
        b1,
        &["topic", "reassign", "execute", "--plan", "-"],
        &off_plan,
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        table(&run.stdout, "TOPIC")
            .iter()
            .filter(|r| r["STATUS"] == "started")
            .count(),
        3,
        "{}",
        run.stdout
    );
    wait_until(
        "the move off broker 3 verifies",
        Duration::from_secs(30),
        || {
            keel_with_stdin(
                b1,
                &["topic", "reassign", "verify", "--plan", "-"],
                &off_plan,
            )
            .code
                == 0
        },
    );
    for ((t, p), r) in assignment(b1).into_iter().filter(|((t, _), _)| t == "off") {
        assert_eq!(r.len(), 2, "{t}-{p}: {r:?}");
        assert!(!r.contains(&3), "{t}-{p}: {r:?}");
    }
    wait_until(
        "broker 3 deletes its logs of off",
        Duration::from_secs(10),
        || (0..3).all(|p| !has_log(&nodes[2], "off", p)),
    );

    // ---- refused partitions: exit 1, each named by its Kafka error -------------------------
    let bad = plan_file(
        &dir,
        "bad.json",
        &serde_json::json!({"version": 1, "partitions": [
            {"topic": "off", "partition": 0, "replicas": [1, 99]},
            {"topic": "nope", "partition": 0, "replicas": [1]},
        ]}),
    );
    let out = expect(b1, &["topic", "reassign", "execute", "--plan", &bad], 1);
    let rows = table(&out, "TOPIC");
    assert_eq!(rows[0]["STATUS"], "INVALID_REPLICA_ASSIGNMENT", "{out}");
    assert_eq!(rows[1]["STATUS"], "UNKNOWN_TOPIC_OR_PARTITION", "{out}");
    let r = keel(
        b1,
        &[
            "topic",
            "reassign",
            "execute",
            "--plan",
            "/nonexistent/plan.json",
        ],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("/nonexistent/plan.json"), "{}", r.stderr);

    // ---- stalled by a stopped target, shown, then cancelled --------------------------------
    create(b1, "stall", 1, 1, 1);
    let (leader, _, replicas, _) = partition(b1, "stall", 0).unwrap();
    assert_eq!(replicas, vec![leader]);
    // Not the metadata quorum's leader either: a controller call to a stopped quorum leader
    // waits out its deadline (REQUEST_TIMED_OUT), which is not what this part tests.
    let quorum = quorum_leader(b1);
    let stopped = (1..=3).find(|b| *b != leader && *b != quorum).unwrap();
    // Every CLI request from here on goes to the partition's leader, which keeps running.
    let live = &nodes[index_of(leader)];
    let stall = plan_file(
        &dir,
        "stall.json",
        &serde_json::json!({"version": 1, "partitions": [
            {"topic": "stall", "partition": 0, "replicas": [stopped]}]}),
    );
    nodes[index_of(stopped)].signal("STOP");
    let out = expect(live, &["topic", "reassign", "execute", "--plan", &stall], 0);
    assert_eq!(table(&out, "TOPIC")[0]["STATUS"], "started", "{out}");
    let out = expect(live, &["topic", "describe", "stall"], 0);
    let row = &table(&out, "PARTITION")[0];
    assert_eq!(
        (
            row["REPLICAS"].as_str(),
            row["ADDING"].as_str(),
            row["REMOVING"].as_str()
        ),
        (
            format!("{stopped},{leader}").as_str(),
            stopped.to_string().as_str(),
            leader.to_string().as_str()
        ),
        "{out}"
    );
    let described = json(live, &["topic", "describe", "stall"], 0);
    let p0 = &described[0]["partitions"][0];
    assert_eq!(
        (ints(&p0["adding"]), ints(&p0["removing"])),
        (vec![stopped], vec![leader]),
        "{p0}"
    );
    let verified = json(live, &["topic", "reassign", "verify", "--plan", &stall], 1);
    assert_eq!(verified[0]["status"], "in progress", "{verified}");
    assert_eq!(
        (ints(&verified[0]["adding"]), ints(&verified[0]["removing"])),
        (vec![stopped], vec![leader])
    );
    let out = expect(live, &["topic", "reassign", "cancel", "--plan", &stall], 0);
    assert_eq!(table(&out, "TOPIC")[0]["STATUS"], "cancelled", "{out}");
    let cancelled = json(live, &["topic", "reassign", "cancel", "--plan", &stall], 0);
    assert_eq!(
        cancelled[0]["status"], "NO_REASSIGNMENT_IN_PROGRESS",
        "{cancelled}"
    );
    let (_, _, replicas, isr) = partition(live, "stall", 0).unwrap();
    assert_eq!((replicas, isr), (vec![leader], vec![leader]));
    let verified = json(live, &["topic", "reassign", "verify", "--plan", &stall], 1);
    assert_eq!(verified[0]["status"], "different", "{verified}");
    let described = json(live, &["topic", "describe", "stall"], 0);
    let p0 = &described[0]["partitions"][0];
    assert_eq!(
        (ints(&p0["adding"]), ints(&p0["removing"])),
        (vec![], vec![])
    );
    let out = expect(live, &["topic", "describe", "stall"], 0);
    assert!(!out.contains("ADDING"), "{out}");
    nodes[index_of(stopped)].signal("CONT");
}

/// Finds (creating it) the coordinator of group `g`: the first FindCoordinator creates
/// `__consumer_offsets`.
fn find_coordinator(b: &Broker, g: &str) {
    let mut c = Client::connect(&b.bootstrap());
    let resp: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![g.to_string().into()]),
    );
    assert!(!resp.coordinators.is_empty());
}

#[test]
fn decommission_drains_a_broker_under_an_idempotent_producer_then_unregisters_it() {
    let _serial = serial();
    // __consumer_offsets with two replicas, so that three brokers can drain one of them.
    let mut nodes = cluster(
        3,
        &[
            "--set",
            "offsets.topic.replication.factor=2",
            "--set",
            "offsets.topic.num.partitions=3",
        ],
    );
    let b1 = &nodes[0];
    find_coordinator(b1, "g");
    wait_until("__consumer_offsets exists", Duration::from_secs(20), || {
        assignment(b1)
            .keys()
            .filter(|(t, _)| t == "__consumer_offsets")
            .count()
            == 3
    });
    create(b1, "drain", 3, 2, 1);

    // Too few brokers for an RF-3 topic: refused whole, nothing changes.
    create(b1, "full", 1, 3, 1);
    let before = assignment(b1);
    let r = keel(b1, &["cluster", "decommission", "3"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("not enough brokers") && r.stderr.contains("full-0"),
        "{}",
        r.stderr
    );
    assert_eq!(assignment(b1), before);
    expect(b1, &["topic", "delete", "full"], 0);

    let on_3: Vec<(String, i32)> = assignment(b1)
        .into_iter()
        .filter(|(_, r)| r.contains(&3))
        .map(|(tp, _)| tp)
        .collect();
    assert!(on_3.iter().any(|(t, _)| t == "drain"), "{on_3:?}");
    assert!(
        on_3.iter().any(|(t, _)| t == "__consumer_offsets"),
        "{on_3:?}"
    );

    let all = bootstrap_all(&nodes);
    let checker = Checker::default();
    let reports = Reports::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (all, reports, stop) = (all.clone(), reports.clone(), stop.clone());
        std::thread::spawn(move || {
            let p = producer(&all, &reports);
            let mut sent = 0;
            while !stop.load(Ordering::Relaxed) && sent < 3000 {
                let key = format!("k{sent}");
                let value = format!("value-of-{key}");
                let record = rdkafka::producer::BaseRecord::to("drain")
                    .partition(sent % 3)
                    .key(&key)
                    .payload(&value);
                if p.send(record).is_ok() {
                    sent += 1;
                }
                p.poll(Duration::from_millis(3));
            }
            rdkafka::producer::Producer::flush(&p, Duration::from_secs(60)).unwrap();
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(500));

    // Drained while broker 3 runs: every move completes, but it is not unregistered (it
    // would register again at its next heartbeat).
    let report = json(
        b1,
        &[
            "cluster",
            "decommission",
            "3",
            "--unregister",
            "--wait-secs",
            "60",
        ],
        1,
    );
    stop.store(true, Ordering::Relaxed);
    let moved: Vec<(String, i32)> = report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["status"], "moved", "{report}");
            let (from, to) = (ints(&p["from"]), ints(&p["to"]));
            assert!(from.contains(&3) && !to.contains(&3), "{p}");
            assert_eq!(from.len(), to.len(), "{p}");
            // The new replica takes the removed one's place; the others keep theirs.
            for (f, t) in from.iter().zip(&to) {
                assert!(f == t || *f == 3, "{p}");
            }
            (
                p["topic"].as_str().unwrap().to_string(),
                p["partition"].as_i64().unwrap() as i32,
            )
        })
        .collect();
    assert_eq!(moved, on_3, "{report}");
    assert_eq!(report["moved"], report["total"]);
    assert_eq!(report["left_on_broker"], serde_json::json!([]));
    assert_eq!(report["listed_in_metadata"], true);
    assert_eq!(report["unregister"]["status"], "not sent", "{report}");
    assert!(
        report["unregister"]["error_message"]
            .as_str()
            .unwrap()
            .contains("still running"),
        "{report}"
    );
    for ((t, p), r) in assignment(b1) {
        assert!(!r.contains(&3), "{t}-{p} still on broker 3: {r:?}");
        assert_eq!(r.len(), 2, "{t}-{p}: {r:?}");
    }

    let sent = writer.join().unwrap();
    assert!(sent > 0);
    let results = reports.0.lock().unwrap().clone();
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(errors.is_empty(), "the producer saw errors: {errors:?}");
    checker.acked_reports(&reports, "drain", Acks::All);
    for p in 0..3 {
        final_pass(&checker, &b1.bootstrap(), "drain", p);
    }
    let r = checker.assert_clean("decommission");
    assert_eq!(r.acked_all, sent as u64);
    assert_eq!(checker.unacknowledged_reads(), Vec::<String>::new());

    // Stopped, then unregistered: Metadata lists it no more, and a second unregister finds
    // no registration.
    assert_eq!(nodes[2].stop(), Some(0));
    let b1 = &nodes[0];
    wait_until("broker 3 leaves Metadata", Duration::from_secs(20), || {
        metadata(b1).brokers.iter().all(|b| b.node_id.0 != 3)
    });
    let out = expect(b1, &["cluster", "decommission", "3", "--unregister"], 0);
    assert!(
        out.contains("Broker 3 holds no replicas. Metadata does not list broker 3"),
        "{out}"
    );
    assert!(out.contains("Unregister: broker 3 unregistered."), "{out}");
    let again = json(b1, &["cluster", "decommission", "3", "--unregister"], 1);
    assert_eq!(
        again["unregister"]["status"], "BROKER_ID_NOT_REGISTERED",
        "{again}"
    );
    let m = metadata(b1);
    let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort();
    assert_eq!(brokers, vec![1, 2]);
    assert!(assignment(b1).values().all(|r| !r.contains(&3)));
}

fn create_partitions(
    b: &Broker,
    name: &str,
    count: i32,
    assignments: Option<&[&[i32]]>,
) -> (i16, Option<String>) {
    let mut c = Client::connect(&b.bootstrap());
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(topic(name))
                .with_count(count)
                .with_assignments(assignments.map(|a| {
                    a.iter()
                        .map(|r| {
                            create_partitions_request::CreatePartitionsAssignment::default()
                                .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
                        })
                        .collect()
                })),
        ]);
    let resp: CreatePartitionsResponse = c.send(ApiKey::CreatePartitions, 3, &req);
    let r = &resp.results[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[test]
fn create_partitions_places_new_partitions_on_three_brokers_and_they_replicate() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    let b1 = &nodes[0];
    create(b1, "cp", 1, 3, 2);

    // Placed by the broker, as CreateTopics places them.
    expect(
        b1,
        &["topic", "add-partitions", "cp", "--partitions", "3"],
        0,
    );
    let mut leaders = Vec::new();
    for p in 1..3 {
        wait_for_full_isr(b1, "cp", p);
        let (leader, _, mut replicas, _) = partition(b1, "cp", p).unwrap();
        leaders.push(leader);
        replicas.sort();
        assert_eq!(replicas, vec![1, 2, 3], "cp-{p}");
        produce_and_read_back(&nodes, "cp", p, &format!("auto{p}"));
    }
    assert_ne!(
        leaders[0], leaders[1],
        "the new partitions' leaders are spread"
    );

    // Placed as the request assigns them.
    assert_eq!(
        create_partitions(b1, "cp", 4, Some(&[&[3, 1, 2]])),
        (0, None)
    );
    wait_for_full_isr(b1, "cp", 3);
    let (leader, _, replicas, _) = partition(b1, "cp", 3).unwrap();
    assert_eq!((leader, replicas), (3, vec![3, 1, 2]));
    produce_and_read_back(&nodes, "cp", 3, "manual");

    // Assignments Kafka refuses, and nothing is created.
    for (count, bad) in [
        (6, &[&[1, 2, 3][..]][..]),
        (5, &[&[1, 2][..]][..]),
        (5, &[&[1, 1, 2][..]][..]),
        (5, &[&[1, 2, 9][..]][..]),
        (5, &[&[][..]][..]),
    ] {
        let (code, message) = create_partitions(b1, "cp", count, Some(bad));
        assert_eq!(code, 39, "INVALID_REPLICA_ASSIGNMENT for {bad:?}");
        assert!(message.is_some_and(|m| m.contains("assignment")), "{bad:?}");
    }
    assert_eq!(assignment(b1).keys().filter(|(t, _)| t == "cp").count(), 4);
}
