//! Controlled shutdown, KRaft's way, in a three-broker cluster: on SIGTERM the broker's
//! heartbeats ask to shut down while it still serves; the controller moves its leadership to
//! other ISR members and takes it out of every ISR (into the ELR where that leaves the ISR
//! below `min.insync.replicas`, KIP-966), then approves; only then does the broker stop, and
//! its clean-shutdown record lets the next start skip rescanning its active segments.
//!
//! The session and lag timeouts are long (20 s): a broker that stopped without handing over
//! would hold every acks=all write of its partitions for that long, which the test's bounds
//! (a few seconds) would catch.

mod common;

use std::time::{Duration, Instant};

use common::replicated::*;
use rdkafka::producer::{BaseRecord, Producer};

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `recovery_scanned_bytes` of the last "partition opened" line for `topic`-`p` in `log`.
fn scanned_bytes(log: &str, topic: &str, p: i32) -> u64 {
    let needle = format!("topic={topic} partition={p} ");
    strip_ansi(log)
        .lines()
        .rev()
        .filter(|l| l.contains("partition opened") && l.contains(&needle))
        .filter_map(|l| l.split("recovery_scanned_bytes=").nth(1))
        .find_map(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no 'partition opened' line for {topic}-{p}"))
}

/// The segment files of a partition directory with their sizes (for a failure's message).
fn segment_files(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| {
                    let len = e.metadata().map_or(0, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The log's lines about stopping and reopening cs-0 (for a failure's message).
fn stop_lines(log: &str) -> String {
    strip_ansi(log)
        .lines()
        .filter(|l| {
            [
                "logs closed",
                "closing log",
                "shard stopped",
                "clean",
                "topic=cs partition=0 ",
            ]
            .iter()
            .any(|k| l.contains(k))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sigterm_hands_leadership_over_before_stopping_and_the_restart_skips_recovery() {
    let _serial = serial();
    let mut nodes = cluster(
        3,
        &[
            "--set",
            "broker.session.timeout.ms=20000",
            "--set",
            "replica.lag.time.max.ms=20000",
        ],
    );
    // Small index spacing: the active segments get index entries, which a clean restart trusts.
    create_with_configs(
        &nodes[0],
        "cs",
        3,
        3,
        &[
            ("min.insync.replicas", "2"),
            ("index.interval.bytes", "1024"),
        ],
    );
    // min ISR 3: a member that leaves makes the ISR too small, so it stays eligible (ELR).
    create(&nodes[0], "strict", 1, 3, 3);
    for p in 0..3 {
        wait_for_full_isr(&nodes[0], "cs", p);
    }
    wait_for_full_isr(&nodes[0], "strict", 0);
    let (victim, _, _, _) = partition(&nodes[0], "cs", 0).unwrap();
    let v = index_of(victim);
    let other = (v + 1) % 3;
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");

    // Some data first, in many batches (at most 10 records each: librdkafka would otherwise
    // pack a busy machine's 300 records into one or two), so the victim's active segments are
    // indexed.
    let reports = Reports::default();
    let p: rdkafka::producer::BaseProducer<Reports> = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &all)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .set("batch.num.messages", "10")
        .set("message.timeout.ms", "60000")
        .create_with_context(reports.clone())
        .unwrap();
    for part in 0..3 {
        send_all(&p, "cs", part, &keys(&format!("pre{part}-"), 300));
    }
    // An idempotent acks=all producer writes throughout (bounded).
    let writer = Writer::start(&all, "cs", 3, "k", 3000, Duration::from_millis(5));
    std::thread::sleep(Duration::from_secs(1));

    let code = nodes[v].stop();
    assert_eq!(code, Some(0), "clean exit");
    let log = strip_ansi(&nodes[v].log_text());
    let handed_over = log
        .find("controlled shutdown done")
        .unwrap_or_else(|| panic!("no approved controlled shutdown; log:\n{log}"));
    let stopped = log.find("shard stopped").expect("shards stopped");
    assert!(
        handed_over < stopped,
        "leadership moved before the shards stopped serving"
    );

    // The controller's image, as the others have it: the victim leads nothing, is in no ISR,
    // and where its leaving took the ISR below min ISR it is an eligible leader replica.
    wait_until(
        "the others see the handover",
        Duration::from_secs(5),
        || {
            (0..3).all(|part| {
                partition(&nodes[other], "cs", part)
                    .is_some_and(|(l, _, _, isr)| l > 0 && l != victim && !isr.contains(&victim))
            })
        },
    );
    let strict = describe(&nodes[other], "strict");
    assert!(
        !ids(&strict["isr"]).contains(&i64::from(victim)),
        "{strict}"
    );
    assert_eq!(ids(&strict["elr"]), vec![i64::from(victim)], "{strict}");

    // No acks=all write waits for the broker that left: a fresh producer's record to every
    // partition is acknowledged well within the 20 s the lag and session timeouts would take.
    let probe_reports = Reports::default();
    let probe = producer(&nodes[other].bootstrap(), &probe_reports);
    let started = Instant::now();
    for part in 0..3 {
        let key = format!("probe{part}");
        let value = format!("value-of-{key}");
        probe
            .send(
                BaseRecord::to("cs")
                    .partition(part)
                    .key(&key)
                    .payload(&value),
            )
            .unwrap();
    }
    probe.flush(Duration::from_secs(8)).unwrap();
    let probe_ms = started.elapsed().as_millis();
    let probe_acked = acked(&probe_reports);
    assert_eq!(probe_acked.len(), 3, "{probe_acked:?}");
    assert!(probe_ms < 8000, "acks=all stalled {probe_ms} ms");

    // The clean restart trusts the indexes close() wrote: it scans only past the last entry
    // (an entry: relative offset u32, file position u32).
    let dir = nodes[v].data_dir().join("cs-0");
    let index = std::fs::read(dir.join("00000000000000000000.index")).unwrap();
    let stopped_size = std::fs::metadata(dir.join("00000000000000000000.log"))
        .unwrap()
        .len();
    assert!(
        index.len() >= 8,
        "close() indexed the active segment: {:?}",
        segment_files(&dir)
    );
    let last_entry = u32::from_be_bytes(index[index.len() - 4..].try_into().unwrap()) as u64;
    nodes[v].restart_after_stop();
    for part in 0..3 {
        wait_for_full_isr(&nodes[other], "cs", part);
    }
    let log = nodes[v].log_text();
    let clean_scan = scanned_bytes(&log, "cs", 0);
    assert!(
        clean_scan == stopped_size - last_entry && clean_scan < stopped_size,
        "a clean restart rescanned {clean_scan} bytes of cs-0 ({stopped_size} bytes, last \
         index entry at {last_entry}); files: {:?}; log: {}",
        segment_files(&dir),
        stop_lines(&log)
    );

    let errors = writer.errors();
    let written = writer.reports.clone();
    let sent = writer.stop();
    assert_eq!(errors, Vec::<String>::new(), "the producer saw errors");
    let mut acked_all = acked(&reports);
    acked_all.extend(acked(&written));
    assert_eq!(acked_all.len(), 900 + sent as usize);

    // After a kill -9 nothing is trusted: the active segment is scanned whole.
    let size: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().unwrap().len())
        .max()
        .unwrap();
    nodes[v].kill9_and_restart();
    let after_crash = scanned_bytes(&nodes[v].log_text(), "cs", 0);
    assert!(
        after_crash >= size && size > 4096,
        "after a crash {after_crash} bytes scanned of {size}"
    );

    // Every acknowledged record is there, once, at its offset.
    for part in 0..3 {
        wait_for_full_isr(&nodes[other], "cs", part);
        let mine: Vec<(String, i32, i64)> = acked_all
            .iter()
            .chain(&probe_acked)
            .filter(|(_, p, _)| *p == part)
            .cloned()
            .collect();
        let last = mine.iter().map(|(_, _, o)| *o).max().unwrap();
        let read = read_all(&nodes[other].bootstrap(), "cs", part, last);
        check_acknowledged(&mine, &read);
    }
}
