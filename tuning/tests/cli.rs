//! The `keel-tune` binary on this machine and on a fixture root: exits 0, prints every check.

use std::process::Command;

const ALL_CHECKS: [&str; 16] = [
    "cpu.governor",
    "irq.nvme",
    "irq.nic",
    "disk.scheduler",
    "disk.nomerges",
    "disk.rq_affinity",
    "disk.write_cache",
    "vm.swappiness",
    "mm.transparent_hugepage",
    "clocksource",
    "fs.aio-max-nr",
    "rlimit.memlock",
    "rlimit.nofile",
    "fs.type",
    "fs.mount_options",
    "fs.ballast",
];

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
