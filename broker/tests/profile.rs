//! `keel profile`: a per-core profile of a live broker. While librdkafka produces to a
//! broker of two shards and the debug-build hook blocks shard 0's reactor once, `keel profile
//! --duration 3s` runs against the broker's admin endpoint; its JSON must show both shard
//! threads by their kernel names and ids, busy time per shard and per task queue, the
//! Produce requests by stage with ordered percentiles, and the stall (shard 0, its task queue,
//! the blocking frame); the HTML page must show the same.
#![cfg(debug_assertions)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::client::{create_topic, Client};
use common::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::Value;

const TOPIC: &str = "profiled";

fn keel() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_keel"));
    c.env_remove("RUST_LOG");
    c
}

#[test]
fn profile_of_a_live_broker_under_load() {
    let broker = Broker::start(&["--set", "reactor.stall.threshold.ms=20"]);
    let mut c = Client::connect(&broker.bootstrap());
    create_topic(&mut c, TOPIC, 4);
    let out = tempfile::tempdir().unwrap();
    let profile = keel()
        .args([
            "profile",
            "--duration",
            "3s",
            "--admin",
            &format!("127.0.0.1:{}", broker.admin_port),
            "--out",
        ])
        .arg(out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Load inside the window: 2000 keyed records over the 4 partitions, acks=all.
    std::thread::sleep(Duration::from_millis(300));
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    let started = Instant::now();
    for i in 0..2000 {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        let r = BaseRecord::to(TOPIC).key(&key).payload(&value);
        p.send(r).map_err(|(e, _)| e).unwrap();
        p.poll(Duration::ZERO);
        if i % 200 == 199 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "load overran the window"
    );
    // One stall on shard 0 (past glommio's 100 ms budget plus the 20 ms threshold).
    let body = broker.admin_get("/debug/block?ms=300");
    assert!(body.contains("blocked 300 ms"), "{body}");
    let done = profile.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("keel-shard-0") && stdout.contains("keel-shard-1"),
        "{stdout}"
    );

    let text = std::fs::read_to_string(out.path().join("profile.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let duration = r["duration_s"].as_f64().unwrap();
    assert!((2.9..6.0).contains(&duration), "{duration}");

    // Shards: kernel thread names and ids of the broker's own threads.
    let shards = r["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2, "{text}");
    let mut produce_requests = 0;
    let mut thread_cpu = 0.0;
    for (i, s) in shards.iter().enumerate() {
        assert_eq!(s["shard"], i as u64);
        assert_eq!(s["thread_name"], format!("keel-shard-{i}"));
        let tid = s["thread_id"].as_u64().unwrap();
        let comm =
            std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", broker.pid())).unwrap();
        assert_eq!(comm.trim(), format!("keel-shard-{i}"));
        let busy = s["reactor_busy_pct"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 100.5, "{s}");
        // The kernel's count for this one thread: a thread cannot use more than one core.
        let cpu = s["thread_cpu_pct"].as_f64().unwrap();
        assert!((0.0..=100.5).contains(&cpu), "{s}");
        thread_cpu += cpu;
        let queues: Vec<&str> = s["task_queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["queue"].as_str().unwrap())
            .collect();
        assert!(
            queues.contains(&"default") && queues.contains(&"retention"),
            "{s}"
        );
        produce_requests += s["requests"]["Produce"].as_u64().unwrap_or(0);
        // Hops per request read: the hop count over the shard's requests, never above the
        // shard count's worth of splits.
        let per = s["hops_per_request"].as_f64().unwrap();
        let hops = s["cross_shard_hops"].as_f64().unwrap();
        let requests: f64 = s["requests"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        if requests > 0.0 {
            assert!((per - hops / requests).abs() < 0.002, "{s}");
        }
        assert!((0.0..=2.0).contains(&per), "{s}");
    }
    assert!(produce_requests >= 1, "{text}");
    assert!(thread_cpu > 0.0, "{text}");
    // Shard 0 ran the 300 ms block: at least that much busy time on its default queue.
    let q0 = &shards[0]["task_queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "default")
        .unwrap()["busy_s"];
    assert!(q0.as_f64().unwrap() >= 0.29, "{q0}");
    assert!(shards[0]["stalls"].as_u64().unwrap() >= 1, "{text}");
    assert_eq!(shards[1]["stalls"], 0, "{text}");

    // Stages: every Produce request of the window is in its total; percentiles are ordered.
    let stages = r["stages"].as_array().unwrap();
    let find = |api: &str, stage: &str| {
        stages
            .iter()
            .find(|s| s["api"] == api && s["stage"] == stage)
            .unwrap_or_else(|| panic!("no {api}/{stage} in {text}"))
    };
    let total = find("Produce", "total");
    assert_eq!(total["count"].as_u64().unwrap(), produce_requests, "{text}");
    for stage in ["total", "queue_wait", "append", "flush", "response_write"] {
        let s = find("Produce", stage);
        let p50 = s["p50_ms"].as_f64().unwrap();
        let p99 = s["p99_ms"].as_f64().unwrap();
        let p999 = s["p999_ms"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999, "{s}");
        assert!(s["count"].as_u64().unwrap() >= 1, "{s}");
    }

    // The stall: shard 0, its task queue, over budget by about 300 ms less budget and
    // threshold, and the blocking admin handler among Keel's frames.
    let top = &r["top_stalls"].as_array().unwrap()[0];
    assert_eq!(top["shard"], 0, "{text}");
    assert_eq!(top["queue"], "default", "{text}");
    assert!(top["overage_ms"].as_f64().unwrap() > 100.0, "{top}");
    assert!(
        top["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("broker/src/ops/admin.rs:")),
        "{top}"
    );

    let html = std::fs::read_to_string(out.path().join("profile.html")).unwrap();
    for needle in [
        "keel-shard-0",
        "keel-shard-1",
        "Top stalls",
        "broker/src/ops/admin.rs:",
        "Produce",
        "flush",
        "retention",
    ] {
        assert!(html.contains(needle), "{needle} missing from the HTML");
    }
}

#[test]
fn profile_without_a_broker_fails_clearly() {
    let port = common::free_port();
    let out = keel()
        .args([
            "profile",
            "--duration",
            "1s",
            "--admin",
            &format!("127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("connecting to the admin endpoint") && stderr.contains("is keel running"),
        "{stderr}"
    );
    let bad = keel()
        .args(["profile", "--duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad duration"));
}
