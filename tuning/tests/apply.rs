//! `--apply` and `--dry-run` against fixture trees: what is written, what is left alone, the
//! printed changes and undo commands, and knobs that cannot be changed (missing, unreadable,
//! refused by the kernel) reported without failing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use keel_tuning::apply::{self, Change, Mode, Outcome};
use keel_tuning::{Host, Needs};

/// Files of a host that wants every knob `--apply` sets changed.
const UNTUNED: [(&str, &str); 9] = [
    ("/proc/mounts", "/dev/nvme0n1p1 /data xfs rw,noatime 0 0\n"),
    ("/sys/block/nvme0n1/queue/nomerges", "0\n"),
    ("/sys/block/nvme0n1/queue/rq_affinity", "1\n"),
    ("/sys/block/nvme0n1/queue/write_cache", "write back\n"),
    (
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "powersave\n",
    ),
    (
        "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "performance\n",
    ),
    ("/proc/sys/vm/swappiness", "60\n"),
    (
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    ),
    ("/proc/sys/fs/aio-max-nr", "1024\n"),
];

fn untuned() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (abs, content) in UNTUNED {
        write(dir.path(), abs, content);
    }
    fs::create_dir_all(under(dir.path(), "/sys/block/nvme0n1/nvme0n1p1")).expect("mkdir");
    dir
}

fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

fn write(root: &Path, abs: &str, content: &str) {
    let path = under(root, abs);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

fn read(root: &Path, abs: &str) -> String {
    fs::read_to_string(under(root, abs)).unwrap_or_else(|e| format!("<{e}>"))
}

fn needs() -> Needs {
    Needs {
        data_dir: PathBuf::from("/data/keel"),
        shards: 4,
        partitions: 1000,
        io_memory_bytes: Needs::IO_MEMORY_BYTES_DEFAULT,
        ballast_path: None,
        ballast_bytes_min: Needs::BALLAST_BYTES_DEFAULT,
    }
}

fn find<'a>(changes: &'a [Change], check: &str) -> &'a Change {
    changes
        .iter()
        .find(|c| c.check == check)
        .unwrap_or_else(|| panic!("no {check} in {changes:#?}"))
}

/// (check, old, new) of every change, in report order.
const EXPECTED: [(&str, &str, &str); 6] = [
    ("cpu.governor", "powersave", "performance"),
    ("disk.nomerges", "0", "2"),
    ("disk.rq_affinity", "1", "2"),
    ("vm.swappiness", "60", "1"),
    ("mm.transparent_hugepage", "always", "madvise"),
    ("fs.aio-max-nr", "1024", "8192"),
];

fn assert_planned(root: &Path, changes: &[Change], outcome: Outcome) {
    let got: Vec<(&str, &str, &str)> = changes
        .iter()
        .map(|c| (c.check, c.old.as_str(), c.new.as_str()))
        .collect();
    assert_eq!(got, EXPECTED, "{changes:#?}");
    for c in changes {
        assert_eq!(c.outcome, outcome, "{c:?}");
        assert!(c.path.starts_with(root.to_str().expect("utf-8")), "{c:?}");
        assert_eq!(c.undo, format!("echo {} > {}", c.old, c.path));
    }
}

#[test]
fn apply_writes_and_prints_undo() {
    let dir = untuned();
    let host = Host::at(dir.path());
    let changes = apply::run(&host, &needs(), Mode::Apply);
    assert_planned(dir.path(), &changes, Outcome::Changed);

    let cpu0 = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor";
    assert_eq!(read(dir.path(), cpu0), "performance\n");
    assert_eq!(read(dir.path(), "/sys/block/nvme0n1/queue/nomerges"), "2\n");
    assert_eq!(
        read(dir.path(), "/sys/block/nvme0n1/queue/rq_affinity"),
        "2\n"
    );
    assert_eq!(read(dir.path(), "/proc/sys/vm/swappiness"), "1\n");
    // sysfs shows a choice list; a plain file reads back what was written.
    assert_eq!(
        read(dir.path(), "/sys/kernel/mm/transparent_hugepage/enabled"),
        "madvise\n"
    );
    assert_eq!(read(dir.path(), "/proc/sys/fs/aio-max-nr"), "8192\n");
    // Never touched: the write cache; nor the CPU already as wanted.
    assert_eq!(
        read(dir.path(), "/sys/block/nvme0n1/queue/write_cache"),
        "write back\n"
    );

    let swappiness = find(&changes, "vm.swappiness");
    assert_eq!(
        swappiness.render(),
        format!(
            "vm.swappiness: 60 -> 1 ({0})\n  undo: echo 60 > {0}",
            under(dir.path(), "/proc/sys/vm/swappiness").display()
        )
    );

    // Applying again finds nothing left to change; the undo commands restore the old values.
    assert_eq!(apply::run(&host, &needs(), Mode::Apply), Vec::new());
    for c in &changes {
        let status = Command::new("sh")
            .arg("-c")
            .arg(&c.undo)
            .status()
            .expect("sh");
        assert!(status.success(), "{}", c.undo);
    }
    for (abs, content) in UNTUNED {
        let want = if abs.ends_with("transparent_hugepage/enabled") {
            "always\n"
        } else {
            content
        };
        assert_eq!(read(dir.path(), abs), want, "{abs}");
    }
}

#[test]
fn dry_run_writes_nothing() {
    let dir = untuned();
    let changes = apply::run(&Host::at(dir.path()), &needs(), Mode::DryRun);
    assert_planned(dir.path(), &changes, Outcome::WouldChange);
    for (abs, content) in UNTUNED {
        assert_eq!(read(dir.path(), abs), content, "{abs}");
    }
}

#[test]
fn cannot_change_is_reported_not_failed() {
    let dir = untuned();
    // Missing: THP; unreadable: nomerges is a directory; unparsable: rq_affinity.
    fs::remove_file(under(
        dir.path(),
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ))
    .expect("rm");
    let nomerges = under(dir.path(), "/sys/block/nvme0n1/queue/nomerges");
    fs::remove_file(&nomerges).expect("rm");
    fs::create_dir(&nomerges).expect("mkdir");
    write(dir.path(), "/sys/block/nvme0n1/queue/rq_affinity", "a b\n");
    // Readable but refused even to root: a read-only sysctl.
    let swappiness = under(dir.path(), "/proc/sys/vm/swappiness");
    fs::remove_file(&swappiness).expect("rm");
    std::os::unix::fs::symlink("/proc/sys/kernel/ngroups_max", &swappiness).expect("symlink");
    let before = fs::read_to_string(&swappiness).expect("ngroups_max");

    let changes = apply::run(&Host::at(dir.path()), &needs(), Mode::Apply);
    for check in [
        "disk.nomerges",
        "disk.rq_affinity",
        "vm.swappiness",
        "mm.transparent_hugepage",
    ] {
        let c = find(&changes, check);
        assert!(matches!(c.outcome, Outcome::CannotChange(_)), "{c:?}");
        assert!(
            c.render()
                .starts_with(&format!("{check}: cannot change here (")),
            "{c:?}"
        );
        assert!(c.undo.is_empty(), "{c:?}");
    }
    assert_eq!(fs::read_to_string(&swappiness).expect("read"), before);
    // The rest still changed.
    assert_eq!(find(&changes, "fs.aio-max-nr").outcome, Outcome::Changed);
    assert_eq!(find(&changes, "cpu.governor").outcome, Outcome::Changed);

    // No data disk, no cpufreq: said once each.
    let empty = tempfile::tempdir().expect("temp dir");
    fs::create_dir_all(under(empty.path(), "/sys/devices/system/cpu/cpu0")).expect("mkdir");
    let changes = apply::run(&Host::at(empty.path()), &needs(), Mode::Apply);
    assert_eq!(changes.len(), 6, "{changes:#?}");
    assert!(changes
        .iter()
        .all(|c| matches!(c.outcome, Outcome::CannotChange(_))));
}

fn keel_tune(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-tune"))
        .args(args)
        .output()
        .expect("run keel-tune");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn cli_apply_and_dry_run_on_a_fixture() {
    let dir = untuned();
    let root = dir.path().to_str().expect("utf-8");
    let args = ["--root", root, "--data-dir", "/data/keel", "--shards", "4"];
    let swappiness = under(dir.path(), "/proc/sys/vm/swappiness");

    let (rc, dry) = keel_tune(&[&args[..], &["--dry-run"]].concat());
    assert_eq!(rc, 0, "{dry}");
    assert!(dry.starts_with("dry run: nothing is written\n"), "{dry}");
    assert_eq!(read(dir.path(), "/proc/sys/vm/swappiness"), "60\n");

    let (rc, applied) = keel_tune(&[&args[..], &["--apply"]].concat());
    assert_eq!(rc, 0, "{applied}");
    assert_eq!(read(dir.path(), "/proc/sys/vm/swappiness"), "1\n");
    let line = format!("vm.swappiness: 60 -> 1 ({})", swappiness.display());
    let undo = format!("  undo: echo 60 > {}", swappiness.display());
    for out in [&dry, &applied] {
        assert!(out.contains(&line) && out.contains(&undo), "{out}");
        for check in ["rlimit.memlock", "rlimit.nofile", "disk.write_cache"] {
            assert!(
                out.contains(&format!("{check}: not changed automatically: ")),
                "{out}"
            );
        }
    }
    // The table after --apply shows the new values.
    assert!(
        applied
            .lines()
            .any(|l| l.starts_with("vm.swappiness") && l.contains("  ok")),
        "{applied}"
    );

    let (rc, json) = keel_tune(&[&args[..], &["--apply", "--json"]].concat());
    assert_eq!(rc, 0, "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(json["changes"], serde_json::json!([]), "{json}");
}

/// On this machine (a VM, maybe not root): never writes, never fails.
#[test]
fn cli_dry_run_on_this_machine() {
    let before = fs::read_to_string("/proc/sys/vm/swappiness").ok();
    let (rc, out) = keel_tune(&[
        "--dry-run",
        "--data-dir",
        &std::env::temp_dir().to_string_lossy(),
    ]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.starts_with("dry run: nothing is written\n"), "{out}");
    assert!(out.contains("16 checks: "), "{out}");
    assert_eq!(fs::read_to_string("/proc/sys/vm/swappiness").ok(), before);
}
