//! The admin CLI (`keel topic|produce|consume|group|cluster`, crate keel-cli) run as a process
//! against the real `keel` binary, asserting on what it prints: table cells (read by the
//! header's column positions) and `--json` documents. Records produced by librdkafka in every
//! codec are read back through the CLI. One broker per test: topics, records
//! and the cluster in one; consumer groups (an rdkafka member that joins, commits and leaves,
//! then offset resets and deletes) in the other.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
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
        .args(["-b", &b.bootstrap()])
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

/// Runs and expects exit 0; returns stdout.
fn ok(b: &Broker, args: &[&str]) -> String {
    let r = keel(b, args);
    assert_eq!(
        r.code, 0,
        "keel {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r.stdout
}

/// Runs with `--json` and expects exit 0.
fn json(b: &Broker, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = ok(b, &args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("keel {args:?}: {e}:\n{text}"))
}

/// Runs and expects a failure with `code`; returns stderr.
fn fails(b: &Broker, args: &[&str], code: i32) -> String {
    let r = keel(b, args);
    assert_eq!(
        r.code, code,
        "keel {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r.stderr
}

/// A table's rows, as column name -> cell, read by the header's column positions. The
/// table starts at the line beginning with `first_column` and ends at a blank line or at the
/// next table's header (a line of upper-case words only).
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
    let is_header = |l: &str| {
        l.split_whitespace()
            .all(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '-'))
    };
    let mut rows = Vec::new();
    for line in lines {
        if line.trim().is_empty() || is_header(line) {
            break;
        }
        let mut row = BTreeMap::new();
        for (i, (start, name)) in columns.iter().enumerate() {
            let end = columns.get(i + 1).map(|c| c.0).unwrap_or(usize::MAX);
            let cell = line
                .get(*start..end.min(line.len()))
                .unwrap_or("")
                .trim()
                .to_string();
            row.insert(name.clone(), cell);
        }
        rows.push(row);
    }
    rows
}

/// The one row whose `column` is `value`.
fn row<'a>(
    rows: &'a [BTreeMap<String, String>],
    column: &str,
    value: &str,
) -> &'a BTreeMap<String, String> {
    let found: Vec<_> = rows.iter().filter(|r| r[column] == value).collect();
    assert_eq!(found.len(), 1, "rows with {column}={value}: {rows:?}");
    found[0]
}

/// Selected cells of a row, for one-line comparisons.
fn cells(row: &BTreeMap<String, String>, columns: &[&str]) -> Vec<String> {
    columns.iter().map(|c| row[*c].clone()).collect()
}

fn now_ms() -> i64 {
    keel_vocab::Clock::now_ms(&keel_vocab::SystemClock)
}

/// Retries `f` until it holds (metadata reaches every shard asynchronously).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn topics_records_and_cluster() {
    let b = Broker::start(&[]);

    // ---- topic create ----------------------------------------------------------------------
    let out = ok(
        &b,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=86400000",
        ],
    );
    let rows = table(&out, "TOPIC");
    assert_eq!(
        cells(
            row(&rows, "TOPIC", "orders"),
            &["PARTITIONS", "REPLICATION", "STATUS"]
        ),
        ["3", "1", "created"]
    );
    let err = fails(&b, &["topic", "create", "orders", "--partitions", "3"], 1);
    assert!(err.contains("TOPIC_ALREADY_EXISTS"), "{err}");
    let out = ok(&b, &["topic", "create", "orders", "--if-not-exists"]);
    assert_eq!(
        row(&table(&out, "TOPIC"), "TOPIC", "orders")["STATUS"],
        "exists"
    );
    let created = json(
        &b,
        &["topic", "create", "--topic", "events", "--partitions", "1"],
    );
    assert_eq!(created["topic"], "events");
    assert_eq!(created["status"], "created");
    assert_eq!(created["partitions"], 1);
    assert_eq!(created["replication_factor"], 1);

    // ---- topic list / describe -------------------------------------------------------------
    eventually("both topics listed", || {
        let rows = table(&ok(&b, &["topic", "list"]), "TOPIC");
        rows.iter().any(|r| r["TOPIC"] == "orders") && rows.iter().any(|r| r["TOPIC"] == "events")
    });
    let rows = table(&ok(&b, &["topic", "list"]), "TOPIC");
    assert_eq!(
        cells(
            row(&rows, "TOPIC", "orders"),
            &["PARTITIONS", "REPLICATION"]
        ),
        ["3", "1"]
    );
    assert_eq!(row(&rows, "TOPIC", "events")["PARTITIONS"], "1");
    let listed = json(&b, &["topic", "list"]);
    let by_name: BTreeMap<String, &Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["topic"].as_str().unwrap().to_string(), t))
        .collect();
    assert_eq!(by_name["orders"]["partitions"], 3);
    assert_eq!(by_name["events"]["partitions"], 1);
    assert_eq!(by_name["orders"]["replication_factor"], 1);

    let out = ok(&b, &["topic", "describe", "orders"]);
    assert!(
        out.starts_with("Topic: orders  TopicId: "),
        "describe header:\n{out}"
    );
    assert!(
        out.lines()
            .next()
            .unwrap()
            .ends_with("PartitionCount: 3  ReplicationFactor: 1"),
        "{out}"
    );
    let configs = table(&out, "CONFIG");
    assert_eq!(
        cells(
            row(&configs, "CONFIG", "retention.ms"),
            &["VALUE", "SOURCE"]
        ),
        ["86400000", "DYNAMIC_TOPIC_CONFIG"]
    );
    assert_eq!(configs.len(), 1, "only the topic's own config: {configs:?}");
    let partitions = table(&out, "PARTITION");
    assert_eq!(partitions.len(), 3);
    for (i, p) in partitions.iter().enumerate() {
        assert_eq!(
            cells(
                p,
                &[
                    "PARTITION",
                    "LEADER",
                    "REPLICAS",
                    "ISR",
                    "LOG-START",
                    "LOG-END"
                ]
            ),
            [i.to_string().as_str(), "0", "0", "0", "0", "0"]
        );
    }

    // ---- alter-config / add-partitions -----------------------------------------------------
    let out = ok(
        &b,
        &[
            "topic",
            "alter-config",
            "orders",
            "--add-config",
            "max.message.bytes=2048",
            "--delete-config",
            "retention.ms",
        ],
    );
    let rows = table(&out, "TOPIC");
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(
        cells(&rows[0], &["TOPIC", "CONFIG", "VALUE"]),
        ["orders", "max.message.bytes", "2048"]
    );
    let described = json(&b, &["topic", "describe", "orders"]);
    assert_eq!(
        described[0]["configs"],
        serde_json::json!({ "max.message.bytes": "2048" })
    );
    let all = json(&b, &["topic", "describe", "orders", "--all-configs"]);
    assert_eq!(all[0]["configs"]["max.message.bytes"], "2048");
    assert!(
        all[0]["configs"]["cleanup.policy"].is_string(),
        "--all-configs includes defaults: {all}"
    );
    let err = fails(
        &b,
        &[
            "topic",
            "alter-config",
            "orders",
            "--add-config",
            "retention.ms=soon",
        ],
        1,
    );
    assert!(err.contains("INVALID_CONFIG"), "{err}");

    let out = ok(
        &b,
        &["topic", "add-partitions", "orders", "--partitions", "4"],
    );
    assert_eq!(
        cells(
            row(&table(&out, "TOPIC"), "TOPIC", "orders"),
            &["PARTITIONS"]
        ),
        ["4"]
    );
    eventually("4 partitions described", || {
        json(&b, &["topic", "describe", "orders"])[0]["partitions"]
            .as_array()
            .unwrap()
            .len()
            == 4
    });
    let err = fails(
        &b,
        &["topic", "add-partitions", "orders", "--partitions", "2"],
        1,
    );
    assert!(err.contains("INVALID_PARTITIONS"), "{err}");

    // ---- produce: keys, headers, partitions ------------------------------------------------
    let r = keel_with_stdin(
        &b,
        &[
            "produce",
            "orders",
            "--key-separator",
            ":",
            "--header",
            "src=cli",
            "--header",
            "trace=t1",
        ],
        "user1:alpha\nuser2:beta\nuser1:gamma\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let produced = table(&r.stdout, "TOPIC");
    let total: usize = produced
        .iter()
        .map(|r| r["RECORDS"].parse::<usize>().unwrap())
        .sum();
    assert_eq!(total, 3, "{}", r.stdout);
    let pinned = json(
        &b,
        &[
            "produce",
            "orders",
            "--value",
            "x",
            "--value",
            "y",
            "--key",
            "K",
            "--partition",
            "3",
        ],
    );
    assert_eq!(pinned["records"], 2);
    assert_eq!(pinned["partitions"][0]["partition"], 3);
    let first = pinned["partitions"][0]["first_offset"].as_i64().unwrap();
    assert_eq!(pinned["partitions"][0]["last_offset"], first + 1);

    // ---- consume: format template and JSON lines -------------------------------------------
    let out = ok(
        &b,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "5",
            "--format",
            "%p|%o|%k|%v|%h",
        ],
    );
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(lines.len(), 5, "{out}");
    let mut by_value: BTreeMap<&str, &Vec<&str>> = lines.iter().map(|l| (l[3], l)).collect();
    let alpha = by_value.remove("alpha").unwrap();
    let gamma = by_value.remove("gamma").unwrap();
    let beta = by_value.remove("beta").unwrap();
    assert_eq!(alpha[2], "user1");
    assert_eq!(beta[2], "user2");
    assert_eq!(alpha[0], gamma[0], "one key, one partition");
    assert_eq!(
        gamma[1].parse::<i64>().unwrap(),
        alpha[1].parse::<i64>().unwrap() + 1,
        "in order"
    );
    assert_eq!(alpha[4], "src=cli,trace=t1");
    assert_eq!(
        by_value.keys().copied().collect::<Vec<_>>(),
        ["x", "y"],
        "{out}"
    );
    assert_eq!(by_value["y"][0], "3");
    assert_eq!(by_value["y"][2], "K");
    assert_eq!(by_value["y"][4], "");

    let out = ok(
        &b,
        &[
            "consume",
            "orders",
            "--partition",
            "3",
            "--offset",
            &(first + 1).to_string(),
            "--max-messages",
            "1",
            "--json",
        ],
    );
    let record: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(record["topic"], "orders");
    assert_eq!(record["partition"], 3);
    assert_eq!(record["offset"], first + 1);
    assert_eq!(record["key"], "K");
    assert_eq!(record["value"], "y");
    assert_eq!(record["headers"], serde_json::json!({}));
    let out = ok(
        &b,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "5",
            "--timeout-ms",
            "10000",
            "--json",
        ],
    );
    let headed: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["value"] == "beta")
        .collect();
    assert_eq!(headed.len(), 1, "{out}");
    assert_eq!(
        headed[0]["headers"],
        serde_json::json!({ "src": "cli", "trace": "t1" })
    );
    assert_eq!(out.lines().count(), 5, "{out}");

    // ---- consume by offset and by timestamp ------------------------------------------------
    ok(
        &b,
        &[
            "produce", "events", "--value", "e0", "--value", "e1", "--value", "e2",
        ],
    );
    std::thread::sleep(Duration::from_millis(50));
    let middle_ms = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    ok(&b, &["produce", "events", "--value", "e3", "--value", "e4"]);
    let out = ok(
        &b,
        &[
            "consume",
            "events",
            "--from-timestamp",
            &middle_ms.to_string(),
            "--max-messages",
            "2",
            "--timeout-ms",
            "10000",
            "--format",
            "%o %v",
        ],
    );
    assert_eq!(out, "3 e3\n4 e4\n");
    let out = ok(
        &b,
        &[
            "consume",
            "events",
            "--offset",
            "1",
            "--max-messages",
            "2",
            "--format",
            "%o %v",
        ],
    );
    assert_eq!(out, "1 e1\n2 e2\n");
    let r = keel(
        &b,
        &["consume", "events", "--timeout-ms", "300", "--format", "%v"],
    );
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, ""),
        "latest by default: {}",
        r.stderr
    );
    assert!(r.stderr.contains("Processed a total of 0 messages"));
    let described = json(&b, &["topic", "describe", "events"]);
    assert_eq!(described[0]["partitions"][0]["log_start_offset"], 0);
    assert_eq!(described[0]["partitions"][0]["log_end_offset"], 5);

    // ---- consume what librdkafka produced, in every codec -------------------------------------
    ok(&b, &["topic", "create", "codecs", "--partitions", "1"]);
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("compression.codec", codec)
            .set("linger.ms", "20")
            .create()
            .unwrap();
        for i in 0..2 {
            let value = format!("{codec}-{i}");
            let headers = OwnedHeaders::new().insert(Header {
                key: "codec",
                value: Some(codec),
            });
            producer
                .send(
                    BaseRecord::to("codecs")
                        .key(codec)
                        .payload(&value)
                        .headers(headers),
                )
                .unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
    }
    let out = ok(
        &b,
        &[
            "consume",
            "codecs",
            "--from-beginning",
            "--max-messages",
            "8",
            "--format",
            "%o %k %v %h",
        ],
    );
    assert_eq!(
        out,
        "0 gzip gzip-0 codec=gzip\n1 gzip gzip-1 codec=gzip\n\
         2 snappy snappy-0 codec=snappy\n3 snappy snappy-1 codec=snappy\n\
         4 lz4 lz4-0 codec=lz4\n5 lz4 lz4-1 codec=lz4\n\
         6 zstd zstd-0 codec=zstd\n7 zstd zstd-1 codec=zstd\n"
    );

    // ---- cluster info / health -------------------------------------------------------------
    let out = ok(&b, &["cluster", "info"]);
    assert!(out.contains("Controller: 0\n"), "{out}");
    assert!(out.contains("Topics: 3  Partitions: 6\n"), "{out}");
    let brokers = table(&out, "BROKER");
    assert_eq!(brokers.len(), 1);
    assert_eq!(
        cells(&brokers[0], &["BROKER", "ADDRESS", "RACK", "CONTROLLER"]),
        ["0", b.bootstrap().as_str(), "-", "yes"]
    );
    let info = json(&b, &["cluster", "info"]);
    assert!(info["cluster_id"].as_str().is_some_and(|c| !c.is_empty()));
    assert_eq!(info["controller_id"], 0);
    assert_eq!(info["brokers"][0]["port"], b.port);
    assert_eq!(info["topics"], 3);
    assert_eq!(info["partitions"], 6);
    let out = ok(&b, &["cluster", "health"]);
    assert!(out.starts_with("Healthy: yes\n"), "{out}");
    assert!(
        out.contains("Partitions: 6  Offline: 0  UnderReplicated: 0"),
        "{out}"
    );
    let health = json(&b, &["cluster", "health"]);
    assert_eq!(health["healthy"], true);
    assert_eq!(health["brokers"], 1);
    assert_eq!(health["problems"], serde_json::json!([]));

    // ---- topic delete ----------------------------------------------------------------------
    let out = ok(&b, &["topic", "delete", "events"]);
    assert_eq!(
        row(&table(&out, "TOPIC"), "TOPIC", "events")["STATUS"],
        "deleted"
    );
    eventually("events gone from the list", || {
        !table(&ok(&b, &["topic", "list"]), "TOPIC")
            .iter()
            .any(|r| r["TOPIC"] == "events")
    });
    let r = keel(&b, &["topic", "delete", "events"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        r.stderr
    );
    assert_eq!(
        row(&table(&r.stdout, "TOPIC"), "TOPIC", "events")["STATUS"],
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let err = fails(&b, &["topic", "describe", "events"], 1);
    assert!(err.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{err}");

    // ---- usage errors and an unreachable broker --------------------------------------------
    let err = fails(&b, &["topic", "create"], 2);
    assert!(err.contains("a topic name is needed"), "{err}");
    let err = fails(&b, &["consume", "orders", "--bogus"], 2);
    assert!(err.contains("unknown option \"--bogus\""), "{err}");
    let nobody = format!("127.0.0.1:{}", free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["cluster", "info", "--bootstrap-server", &nobody])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot connect to {nobody}")),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let help = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for command in [
        "keel topic",
        "keel produce",
        "keel consume",
        "keel group",
        "keel cluster",
    ] {
        assert!(
            help.contains(command),
            "keel --help lacks {command}:\n{help}"
        );
    }
}

const GROUP: &str = "cli-orders";
const TOPIC: &str = "lagged";

fn group_state(b: &Broker) -> String {
    json(b, &["group", "describe", GROUP])["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Committed offsets by partition, from `group lag --json`.
fn committed(b: &Broker) -> BTreeMap<i64, (i64, i64, i64)> {
    let lag = json(b, &["group", "lag", GROUP]);
    lag["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                (
                    p["committed_offset"].as_i64().unwrap(),
                    p["log_end_offset"].as_i64().unwrap(),
                    p["lag"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

/// `group reset-offsets GROUP --topic TOPIC ...` with `--json`: partition -> (current, new).
fn reset(b: &Broker, args: &[&str]) -> BTreeMap<i64, (Option<i64>, i64)> {
    let mut all = vec!["group", "reset-offsets", GROUP];
    all.extend_from_slice(args);
    let out = json(b, &all);
    out["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                (
                    p["current_offset"].as_i64(),
                    p["new_offset"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn groups_lag_reset_and_delete() {
    let b = Broker::start(&[]);
    ok(&b, &["topic", "create", TOPIC, "--partitions", "2"]);
    let six: Vec<String> = (0..6).map(|i| format!("--value=a{i}")).collect();
    let mut args = vec!["produce", TOPIC, "--partition", "0"];
    args.extend(six.iter().map(String::as_str));
    ok(&b, &args);
    ok(
        &b,
        &[
            "produce",
            TOPIC,
            "--partition",
            "1",
            "--value",
            "b0",
            "--value",
            "b1",
            "--value",
            "b2",
            "--value",
            "b3",
        ],
    );
    std::thread::sleep(Duration::from_millis(50));
    let middle_ms = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    ok(
        &b,
        &[
            "produce",
            TOPIC,
            "--partition",
            "0",
            "--value",
            "a6",
            "--value",
            "a7",
            "--value",
            "a8",
            "--value",
            "a9",
        ],
    );

    // A subscribed member reads, then commits 6 of 10 on partition 0 and 4 of 4 on 1.
    let member: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", GROUP)
        .set("client.id", "cli-test-client")
        .set("group.protocol", "classic")
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    member.subscribe(&[TOPIC]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = 0;
    while read < 14 {
        assert!(Instant::now() < deadline, "read {read} records of 14");
        if let Some(m) = member.poll(Duration::from_millis(50)) {
            m.unwrap();
            read += 1;
        }
    }
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(TOPIC, 0, Offset::Offset(6))
        .unwrap();
    offsets
        .add_partition_offset(TOPIC, 1, Offset::Offset(4))
        .unwrap();
    member.commit(&offsets, CommitMode::Sync).unwrap();

    // ---- while the member is in the group --------------------------------------------------
    let groups = table(&ok(&b, &["group", "list"]), "GROUP");
    assert_eq!(
        cells(row(&groups, "GROUP", GROUP), &["STATE", "PROTOCOL-TYPE"]),
        ["Stable", "consumer"]
    );
    let listed = json(&b, &["group", "list"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == GROUP && g["state"] == "Stable"),
        "{listed}"
    );

    let out = ok(&b, &["group", "describe", GROUP]);
    assert!(
        out.starts_with(&format!(
            "Group: {GROUP}  State: Stable  ProtocolType: consumer  Protocol: range  Coordinator: 0  Members: 1\n"
        )),
        "{out}"
    );
    let members = table(&out, "MEMBER-ID");
    assert_eq!(members.len(), 1, "{out}");
    assert_eq!(
        cells(&members[0], &["CLIENT-ID", "ASSIGNMENT"]),
        ["cli-test-client", &format!("{TOPIC}:0,1")]
    );
    let member_id = members[0]["MEMBER-ID"].clone();
    let described = json(&b, &["group", "describe", GROUP]);
    assert_eq!(described["members"][0]["member_id"], member_id.as_str());
    assert_eq!(
        described["members"][0]["assignment"],
        serde_json::json!([
            { "topic": TOPIC, "partition": 0 },
            { "topic": TOPIC, "partition": 1 },
        ])
    );

    let out = ok(&b, &["group", "lag", GROUP]);
    assert!(
        out.starts_with(&format!(
            "Group: {GROUP}  State: Stable  Members: 1  TotalLag: 4\n"
        )),
        "{out}"
    );
    let lag = table(&out, "TOPIC");
    assert_eq!(lag.len(), 2, "{out}");
    let columns = [
        "TOPIC",
        "COMMITTED",
        "LOG-END",
        "LAG",
        "MEMBER-ID",
        "CLIENT-ID",
    ];
    assert_eq!(
        cells(row(&lag, "PARTITION", "0"), &columns),
        [TOPIC, "6", "10", "4", &member_id, "cli-test-client"]
    );
    assert_eq!(
        cells(row(&lag, "PARTITION", "1"), &columns),
        [TOPIC, "4", "4", "0", &member_id, "cli-test-client"]
    );
    let lag = json(&b, &["group", "lag", GROUP]);
    assert_eq!(lag["total_lag"], 4);
    assert_eq!(lag["partitions"][0]["client_id"], "cli-test-client");
    assert_eq!(committed(&b), [(0, (6, 10, 4)), (1, (4, 4, 0))].into());

    let err = fails(
        &b,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
        ],
        1,
    );
    assert!(
        err.contains("only be reset while it is inactive") && err.contains("Stable"),
        "{err}"
    );
    let err = fails(&b, &["group", "delete", GROUP], 1);
    assert!(err.contains("NON_EMPTY_GROUP"), "{err}");

    // ---- after the member leaves -----------------------------------------------------------
    drop(member);
    eventually("the group to empty", || group_state(&b) == "Empty");
    let out = ok(&b, &["group", "lag", GROUP]);
    let lag = table(&out, "TOPIC");
    assert_eq!(
        cells(
            row(&lag, "PARTITION", "0"),
            &["COMMITTED", "LAG", "MEMBER-ID"]
        ),
        ["6", "4", "-"]
    );

    // A dry run (the default) shows the plan and changes nothing.
    let r = keel(
        &b,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("dry run"), "{}", r.stderr);
    let plan = table(&r.stdout, "GROUP");
    assert_eq!(
        cells(
            row(&plan, "PARTITION", "0"),
            &["GROUP", "TOPIC", "CURRENT-OFFSET", "NEW-OFFSET"]
        ),
        [GROUP, TOPIC, "6", "0"]
    );
    assert_eq!(
        cells(
            row(&plan, "PARTITION", "1"),
            &["CURRENT-OFFSET", "NEW-OFFSET"]
        ),
        ["4", "0"]
    );
    assert_eq!(committed(&b), [(0, (6, 10, 4)), (1, (4, 4, 0))].into());

    // --execute commits; each target as Kafka's tool computes it.
    assert_eq!(
        reset(
            &b,
            &[
                "--topic",
                &format!("{TOPIC}:0"),
                "--to-offset",
                "8",
                "--execute"
            ]
        ),
        [(0, (Some(6), 8))].into()
    );
    assert_eq!(committed(&b), [(0, (8, 10, 2)), (1, (4, 4, 0))].into());
    assert_eq!(
        reset(&b, &["--all-topics", "--shift-by", "-3", "--execute"]),
        [(0, (Some(8), 5)), (1, (Some(4), 1))].into()
    );
    assert_eq!(committed(&b), [(0, (5, 10, 5)), (1, (1, 4, 3))].into());
    assert_eq!(
        reset(
            &b,
            &[
                "--topic",
                TOPIC,
                "--to-datetime",
                &middle_ms.to_string(),
                "--execute"
            ]
        ),
        [(0, (Some(5), 6)), (1, (Some(1), 4))].into(),
        "the first record at or after the time; none after it: the log end"
    );
    assert_eq!(
        reset(&b, &["--topic", TOPIC, "--to-offset", "100", "--execute"]),
        [(0, (Some(6), 10)), (1, (Some(4), 4))].into(),
        "clamped to the log end"
    );
    assert_eq!(
        reset(&b, &["--topic", TOPIC, "--to-earliest", "--execute"]),
        [(0, (Some(10), 0)), (1, (Some(4), 0))].into()
    );
    let out = ok(&b, &["group", "lag", GROUP]);
    assert!(out.contains("TotalLag: 14"), "{out}");
    assert_eq!(
        reset(&b, &["--topic", TOPIC, "--to-latest", "--execute"]),
        [(0, (Some(0), 10)), (1, (Some(0), 4))].into()
    );
    assert_eq!(json(&b, &["group", "lag", GROUP])["total_lag"], 0);

    // ---- delete ----------------------------------------------------------------------------
    let out = ok(&b, &["group", "delete", GROUP]);
    assert_eq!(
        row(&table(&out, "GROUP"), "GROUP", GROUP)["STATUS"],
        "deleted"
    );
    assert!(!json(&b, &["group", "list"])
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["group"] == GROUP));
    let err = fails(&b, &["group", "lag", GROUP], 1);
    assert!(err.contains("GROUP_ID_NOT_FOUND"), "{err}");
    let deleted = keel(&b, &["group", "delete", GROUP, "--json"]);
    assert_eq!(deleted.code, 1);
    let results: Value = serde_json::from_str(&deleted.stdout).unwrap();
    assert_eq!(results[0]["group"], GROUP);
    assert_eq!(results[0]["status"], "GROUP_ID_NOT_FOUND");
}
