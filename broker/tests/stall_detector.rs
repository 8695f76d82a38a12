//! The reactor stall detector (`reactor.stall.threshold.ms`): a task that blocks a shard's
//! reactor is logged with its task queue and a backtrace, and counted per shard. Uses the
//! debug-build-only admin hook `/debug/block?ms=N`, which blocks shard 0's reactor.
#![cfg(debug_assertions)]

mod common;

use std::time::{Duration, Instant};

use common::Broker;

#[test]
fn stall_detector_fires_on_a_blocking_task() {
    let broker = Broker::start(&["--set", "reactor.stall.threshold.ms=20"]);
    assert_eq!(
        broker.metric_by_shard("keel_reactor_stalls_total"),
        vec![0, 0]
    );
    // The threshold counts past the task queue's preemption budget (glommio's default
    // 100 ms), so block well beyond both.
    let asked = Instant::now();
    let body = broker.admin_get("/debug/block?ms=400");
    // The reactor was held for at most as long as this request took to answer (on a
    // loaded machine the 400 ms sleep itself can take longer: CI saw a 1,060 ms stall).
    let answered_in_ms = asked.elapsed().as_secs_f64() * 1000.0;
    assert!(body.contains("blocked 400 ms"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = broker.log_text();
        if log.contains("stall-detector") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let line = log
        .lines()
        .find(|l| l.contains("stall-detector"))
        .unwrap_or_else(|| panic!("no stall logged; log:\n{log}"));
    assert!(line.contains("task queue"), "{line}");
    assert!(line.contains("went over-budget"), "{line}");
    // The backtrace runs through the blocking admin handler.
    let trace = &log[log.find("stall-detector").unwrap()..];
    assert!(trace.contains("Backtrace"), "{trace}");
    assert!(trace.contains("keel_broker::ops::admin::serve"), "{trace}");
    let stalls = broker.metric_by_shard("keel_reactor_stalls_total");
    assert!(stalls[0] >= 1, "{stalls:?}");
    assert_eq!(stalls[1], 0, "{stalls:?}");
    // /debug/stalls keeps the report: shard 0, the default task queue, an overage of about
    // 400 ms less the budget and the threshold (no more than the request's answer time),
    // and the blocking handler's frame.
    let body = broker.admin_get("/debug/stalls");
    let json: serde_json::Value = serde_json::from_str(&body).expect(&body);
    let kept = json["stalls"].as_array().expect(&body);
    assert_eq!(kept.len(), 1, "{body}");
    let s = &kept[0];
    assert_eq!(s["shard"], 0, "{body}");
    assert_eq!(s["queue"], "default", "{body}");
    let overage = s["overage_ms"].as_f64().unwrap();
    let budget = s["budget_ms"].as_f64().unwrap();
    assert!(
        budget > 0.0 && overage > 100.0 && overage + budget < answered_in_ms + 100.0,
        "answered in {answered_in_ms:.1} ms: {body}"
    );
    let frames: Vec<&str> = s["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(
        frames
            .iter()
            .any(|f| f.starts_with("broker/src/ops/admin.rs:")),
        "{body}"
    );
}
