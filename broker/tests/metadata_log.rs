//! The metadata log over time on one node: snapshots by entry count and by time, the log
//! truncated after a snapshot, and recovery from snapshot plus tail after kill -9.

mod common;

use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

fn quorum(b: &Broker) -> serde_json::Value {
    serde_json::from_str(&b.admin_get("/quorum")).expect("quorum JSON")
}

fn topic_names(b: &Broker) -> Vec<String> {
    let mut c = Client::connect(&b.bootstrap());
    let resp: MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false),
    );
    let mut names: Vec<String> = resp
        .topics
        .iter()
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {timeout:?} waiting until {what}");
}

#[test]
fn snapshots_by_count_truncate_the_log_and_recovery_replays_the_tail() {
    let mut b = Broker::start(&["--set", "metadata.log.snapshot.entries=10"]);
    let mut c = Client::connect(&b.bootstrap());
    let mut expected = Vec::new();
    for i in 0..40 {
        let name = format!("t{i:02}");
        create_topic(&mut c, &name, 1);
        expected.push(name);
    }
    wait_until(
        "a snapshot past entry 30 and a purged log",
        Duration::from_secs(10),
        || {
            let q = quorum(&b);
            q["snapshot_index"].as_u64().unwrap_or(0) >= 30
                && q["purged_index"].as_u64().unwrap_or(0) >= 20
        },
    );
    let dir = b.data_dir().join("__cluster_metadata-0");
    assert!(dir.join("snapshot.json").exists());
    let purged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("purged.json")).unwrap()).unwrap();
    assert!(purged["index"].as_u64().unwrap() >= 20, "{purged}");
    // Recovery from snapshot plus tail, after kill -9.
    let q = quorum(&b);
    let applied = q["applied_index"].as_u64().unwrap();
    b.kill9_and_restart();
    assert_eq!(topic_names(&b), expected);
    assert!(b.log_text().contains("metadata snapshot loaded"));
    let q = quorum(&b);
    assert!(q["applied_index"].as_u64().unwrap() > applied, "{q}");
}

#[test]
fn snapshots_by_time() {
    let b = Broker::start(&[
        "--set",
        "metadata.log.snapshot.entries=100000",
        "--set",
        "metadata.log.max.snapshot.interval.ms=1000",
    ]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "timed", 1);
    let applied = quorum(&b)["applied_index"].as_u64().unwrap();
    wait_until("a snapshot by time", Duration::from_secs(10), || {
        quorum(&b)["snapshot_index"].as_u64().unwrap_or(0) >= applied
    });
}
