//! keel-bench against the real `keel` binary: a short workload with --verify loses,
//! duplicates and reorders nothing; `compare` of two Keel instances yields both rows.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The keel binary next to keel-bench (the workspace build puts both in target/<profile>).
fn keel_bin() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_keel-bench")).with_file_name("keel");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        p.display()
    );
    p
}

struct Keel {
    child: Child,
    port: u16,
    admin: u16,
    _dir: tempfile::TempDir,
}

impl Keel {
    fn start() -> Keel {
        let dir = tempfile::tempdir().unwrap();
        // Two different ports: the kernel may hand out the same free port twice in a row.
        let port = free_port();
        let admin = loop {
            let admin = free_port();
            if admin != port {
                break admin;
            }
        };
        let log = std::fs::File::create(dir.path().join("keel.log")).unwrap();
        let child = Command::new(keel_bin())
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--admin",
                &format!("127.0.0.1:{admin}"),
            ])
            .args([
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--smp",
                "2",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = std::fs::read_to_string(dir.path().join("keel.log")).unwrap_or_default();
            if log.matches("shard serving").count() >= 2
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "keel did not start: {log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Keel {
            child,
            port,
            admin,
            _dir: dir,
        }
    }
}

impl Drop for Keel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel-bench"))
}

#[test]
fn verify_finds_nothing_lost_duplicated_or_reordered() {
    let keel = Keel::start();
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--verify",
            "--quiet",
        ])
        .args(["--metrics", &format!("127.0.0.1:{}", keel.admin)])
        .args(["--target-pid", &keel.child.id().to_string()])
        .args([
            "--set",
            "partitions_per_topic=6",
            "--set",
            "producers_per_topic=8",
            "--set",
            "consumers_per_topic=2",
        ])
        .args([
            "--set",
            "compression=lz4",
            "--set",
            "key_distribution=random",
            "--set",
            "message_size=200",
        ])
        .args(["--rate", "3000", "--warmup", "1", "--duration", "3"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        result.status.success(),
        "keel-bench failed: {stdout}\n{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("result.json")).unwrap())
            .unwrap();
    let v = &json["verify"];
    assert!(v["acked"].as_u64().unwrap() > 5000, "{v}");
    assert_eq!(v["acked"], v["consumed"], "{v}");
    assert_eq!(
        (
            v["lost"].as_u64(),
            v["duplicated"].as_u64(),
            v["reordered"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
    // The offset checker saw every acknowledgement with its offset (acks=all) and one full
    // pass per partition, and found nothing wrong.
    let l = &v["ledger"];
    assert_eq!(l["acked_all"], v["acked"], "{l}");
    assert_eq!(l["acked_offset_unknown"].as_u64(), Some(0), "{l}");
    assert_eq!(l["read"], v["acked"], "{l}");
    assert_eq!(l["passes"].as_u64(), Some(6), "{l}");
    for kind in [
        "lost_acks_all",
        "offset_conflicts",
        "duplicated",
        "changed",
        "gone",
        "misplaced",
        "untracked",
    ] {
        assert_eq!(l[kind].as_u64(), Some(0), "{kind}: {l}");
    }
    assert!(stdout.contains("verify offsets"), "{stdout}");
    assert_eq!(
        json["errors"].as_u64(),
        Some(0),
        "{}",
        json["error_samples"]
    );
    // At 3000 rec/s for 3 s the measured count is about 9000.
    let produced = json["produced_records"].as_u64().unwrap();
    assert!((7000..=11000).contains(&produced), "produced {produced}");
    assert!(json["publish_latency"]["p99_ms"].as_f64().unwrap() > 0.0);
    assert!(json["e2e_latency"]["count"].as_u64().unwrap() > 0);
    let shards = json["shards"]
        .as_array()
        .expect("per-shard profile from /metrics");
    assert_eq!(shards.len(), 2);
    assert!(shards.iter().all(|s| s["requests"].as_u64().unwrap() > 0));
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(
        html.matches("<svg").count() >= 2,
        "the report has the two plots"
    );
    assert!(stdout.contains("lost"), "{stdout}");
    // Every report carries the machine probe (a quick one by default) and ratios to it.
    assert!(
        json["probe"]["disk_write_mb_per_s"].as_f64().unwrap() > 0.0,
        "{}",
        json["probe"]
    );
    assert!(stdout.contains("against the machine probe"), "{stdout}");
    // The broker's CPU from /proc/PID/stat, per GB moved, against the floor of the same shape:
    // 200-byte records paced at 3000 × 200 B/s; 8 producers at 375 records/s each gather less
    // than one record per 1 ms linger, so each request (and each floor frame) is one record,
    // not the 16 KiB batch.
    let cpu = &json["target_cpu"];
    assert_eq!(
        cpu["source"].as_str(),
        Some(format!("/proc/{}/stat", keel.child.id()).as_str()),
        "{cpu}"
    );
    assert!(cpu["total_s"].as_f64().unwrap() > 0.0, "{cpu}");
    let floor = &json["probe"]["floor"];
    assert_eq!(floor["frame_bytes"].as_u64(), Some(200), "{floor}");
    assert_eq!(floor["rate_bytes_per_s"].as_u64(), Some(600_000), "{floor}");
    assert_eq!(floor["bytes_received"], floor["bytes_asked"], "{floor}");
    assert_eq!(
        floor["bytes_sent_to_reader"], floor["bytes_asked"],
        "{floor}"
    );
    assert!(
        floor["user_s"].as_f64().unwrap() + floor["system_s"].as_f64().unwrap() > 0.0,
        "{floor}"
    );
    assert!(json["tool_cpu_user_s"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains("CPU per GB moved"), "{stdout}");
    let ratio_line = stdout
        .lines()
        .find(|l| l.contains("target CPU per GB / floor CPU per GB: x"))
        .unwrap_or_else(|| panic!("no ratio to the floor in {stdout}"));
    assert!(!ratio_line.contains(" -"), "{ratio_line}");
}

#[test]
fn max_messages_counts_only_the_measured_phase() {
    let keel = Keel::start();
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--quiet",
            "--no-probe",
        ])
        .args([
            "--set",
            "producers_per_topic=2",
            "--set",
            "max_messages=500",
        ])
        .args(["--rate", "2000", "--warmup", "0.5", "--duration", "20"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("result.json")).unwrap())
            .unwrap();
    // Two producers, 500 measured records each; warm-up records are not counted.
    assert_eq!(json["produced_records"].as_u64(), Some(1000), "{json}");
}

#[test]
fn compare_two_keels_gives_both_rows() {
    let (a, b) = (Keel::start(), Keel::start());
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "compare",
            &format!("alpha=127.0.0.1:{}", a.port),
            &format!("beta=127.0.0.1:{}", b.port),
        ])
        .args([
            "--rounds",
            "2",
            "--rate",
            "2000",
            "--warmup",
            "1",
            "--duration",
            "2",
            "--quiet",
        ])
        .args(["--set", "message_size=100"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let table: Vec<&str> = stdout.lines().collect();
    assert!(
        table.iter().any(|l| l.contains("alpha")) && table.iter().any(|l| l.contains("beta")),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("compare.json")).unwrap())
            .unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "2 rounds x 2 targets");
    let names: Vec<&str> = runs.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec!["alpha", "beta", "beta", "alpha"],
        "rounds alternate the order"
    );
    for r in runs {
        assert!(r["produced_records"].as_u64().unwrap() > 1000, "{r}");
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.contains("alpha") && html.contains("beta"));
}

#[test]
fn clear_errors_for_an_unreachable_target() {
    let port = free_port();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{port}"),
            "--quiet",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(err.contains("cannot connect to 127.0.0.1"), "{err}");
}

#[test]
fn clear_error_for_a_missing_topic() {
    let keel = Keel::start();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--quiet",
            "--duration",
            "1",
        ])
        .args([
            "--set",
            "create_topics=false",
            "--set",
            "topic_prefix=absent",
        ])
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        err.contains("topic \"absent-custom-0\" does not exist"),
        "{err}"
    );
}
