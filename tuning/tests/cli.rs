//! The `keel-tune` binary on this machine and on a fixture root: exits 0, prints every check.

mod common;

use std::process::Command;

use common::ALL_CHECKS;

fn keel_tune(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-tune"))
        .args(args)
        .output()
        .expect("run keel-tune");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn live_host_table() {
    let (rc, stdout, stderr) =
        keel_tune(&["--data-dir", std::env::temp_dir().to_str().expect("utf-8")]);
    assert_eq!(rc, 0, "{stdout}{stderr}");
    for check in ALL_CHECKS {
        assert!(
            stdout.lines().any(|l| l.starts_with(check)),
            "{check} missing:\n{stdout}"
        );
    }
    assert!(stdout.contains("16 checks: "), "{stdout}");
}

#[test]
fn live_host_json() {
    let (rc, stdout, stderr) = keel_tune(&["--json", "--shards", "3"]);
    assert_eq!(rc, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
    assert_eq!(json["shards"], 3);
    let names: Vec<&str> = json["checks"]
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["check"].as_str().expect("str"))
        .collect();
    assert_eq!(names, ALL_CHECKS);
}

#[test]
fn empty_root_is_all_unknown_not_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (rc, stdout, _) = keel_tune(&["--root", dir.path().to_str().expect("utf-8")]);
    assert_eq!(rc, 0, "{stdout}");
    // The limits are this process's (live), the rest unknown.
    assert!(
        stdout.contains("0 fail, 10 unknown") || stdout.contains("unknown"),
        "{stdout}"
    );
    assert!(
        stdout.lines().filter(|l| l.contains("  unknown  ")).count() >= 10,
        "{stdout}"
    );
}

#[test]
fn bad_arguments_exit_2() {
    let (rc, _, stderr) = keel_tune(&["--shards", "many"]);
    assert_eq!(rc, 2);
    assert!(stderr.contains("not a number"), "{stderr}");
    let (rc, stdout, _) = keel_tune(&["--help"]);
    assert_eq!((rc, stdout.contains("usage:")), (0, true));
}

#[test]
fn cpus_list_sets_the_shard_cores() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().to_str().expect("utf-8");
    let json = |extra: &[&str]| {
        let (rc, stdout, stderr) = keel_tune(&[&["--root", root, "--json"][..], extra].concat());
        assert_eq!(rc, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).expect("valid JSON")
    };
    // As the broker's smp = 0: one shard per core given.
    let all = json(&["--cpus", "0-3,8"]);
    assert_eq!(all["shards"], 5);
    assert_eq!(all["shard_cores"], serde_json::json!([0, 1, 2, 3, 8]));
    let two = json(&["--cpus", "8,0-3", "--shards", "2"]);
    assert_eq!(two["shard_cores"], serde_json::json!([0, 1]));
    // A fixture root without --cpus: 0..shards.
    let assumed = json(&["--shards", "3"]);
    assert_eq!(assumed["shard_cores"], serde_json::json!([0, 1, 2]));
    let (rc, stdout, _) = keel_tune(&["--root", root, "--cpus", "4-5", "--shards", "2"]);
    assert_eq!(rc, 0, "{stdout}");
    assert!(stdout.contains(" · 2 shards on cores 4-5 · "), "{stdout}");
    for bad in ["x", "3-1", "", "1,,a"] {
        let (rc, _, stderr) = keel_tune(&["--root", root, "--cpus", bad]);
        assert_eq!(rc, 2, "--cpus {bad:?}");
        assert!(stderr.contains("--cpus: not a cpu list"), "{stderr}");
    }
}

#[test]
fn live_shard_cores_are_this_process_allowed_cpus() {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string();
    let allowed: Vec<u64> = keel_tuning::checks::parse_cpu_list(&list)
        .expect("cpu list")
        .into_iter()
        .collect();
    let (rc, stdout, stderr) = keel_tune(&["--json"]);
    assert_eq!(rc, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
    // The default shard count is the allowed cores, and they are the shard cores.
    assert_eq!(json["shards"], allowed.len());
    assert_eq!(json["shard_cores"], serde_json::json!(allowed));
}
