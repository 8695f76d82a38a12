//! `--apply` and `--dry-run` against fixture trees: what is written, what is left alone, the
//! printed changes and undo commands, and knobs that cannot be changed (missing, unreadable,
//! refused by the kernel) reported without failing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use keel_tuning::apply::{self, Change, Mode, Outcome};
use keel_tuning::{Host, Needs};

/// Files of a host that wants every knob `--apply` sets changed.
const UNTUNED: [(&str, &str); 14] = [
    ("/proc/mounts", "/dev/nvme0n1p1 /data xfs rw,noatime 0 0\n"),
    (
        "/proc/interrupts",
        "      CPU0 CPU1 CPU2 CPU3\n\
          40:  1 0 0 0  PCI-MSIX-0000:00:04.0  1-edge  nvme0q1\n\
          41:  1 0 0 0  PCI-MSIX-0000:00:04.0  2-edge  nvme0q2\n\
          50:  1 0 0 0  PCI-MSIX-0000:00:03.0  1-edge  virtio2-input.0\n\
          51:  1 0 0 0  PCI-MSIX-0000:00:03.0  2-edge  virtio2-output.0\n\
         NMI:  0 0 0 0  Non-maskable interrupts\n",
    ),
    ("/proc/irq/40/smp_affinity_list", "0-3\n"),
    ("/proc/irq/41/smp_affinity_list", "0-3\n"),
    ("/proc/irq/50/smp_affinity_list", "0-3\n"),
    ("/proc/irq/51/smp_affinity_list", "0-3\n"),
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

/// (check, old, new) of every change, in report order. The queue IRQs go one core each over
/// the shard cores 0-3 (a fixture root without --cpus), NIC queues after NVMe queues.
const EXPECTED: [(&str, &str, &str); 10] = [
    ("cpu.governor", "powersave", "performance"),
    ("irq.nvme", "0-3", "0"),
    ("irq.nvme", "0-3", "1"),
    ("irq.nic", "0-3", "2"),
    ("irq.nic", "0-3", "3"),
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
        assert!(!c.persist.is_empty(), "{c:?}");
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
    for (irq, core) in [(40, "0"), (41, "1"), (50, "2"), (51, "3")] {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{core}\n"), "{abs}");
    }
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
    assert_eq!(changes.len(), 8, "{changes:#?}");
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

/// A fixture of NVMe and NIC queue IRQs, each `(irq, name, smp_affinity_list)`.
fn queue_irqs(irqs: &[(u64, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut interrupts = "           CPU0       CPU1\n".to_string();
    for (irq, name, cpus) in irqs {
        interrupts.push_str(&format!(
            "{irq:>4}:  10  0  PCI-MSIX-0000:00:04.0  1-edge  {name}\n"
        ));
        write(
            dir.path(),
            &format!("/proc/irq/{irq}/smp_affinity_list"),
            &format!("{cpus}\n"),
        );
    }
    write(dir.path(), "/proc/interrupts", &interrupts);
    dir
}

/// Four NVMe queues free to fire anywhere, and two NIC queues: one on every shard core, one
/// pinned.
const SPREAD: [(u64, &str, &str); 6] = [
    (40, "nvme0q1", "0-15"),
    (41, "nvme0q2", "0-15"),
    (42, "nvme0q3", "0-15"),
    (43, "nvme0q4", "0-15"),
    (50, "mlx5_comp0@pci:0000:00:08.0", "2,5,8"),
    (51, "mlx5_comp1@pci:0000:00:08.0", "5"),
];

/// Where each queue IRQ of [`SPREAD`] goes over the cores 2,5,8: round-robin, the NIC queues
/// continuing where the NVMe queues stopped.
const SPREAD_TO: [(u64, &str); 6] = [
    (40, "2"),
    (41, "5"),
    (42, "8"),
    (43, "2"),
    (50, "5"),
    (51, "8"),
];

fn needs_shards(shards: u64) -> Needs {
    Needs { shards, ..needs() }
}

fn irq_changes(changes: &[Change]) -> Vec<(&str, &str, &str, &str)> {
    changes
        .iter()
        .filter(|c| c.check.starts_with("irq."))
        .map(|c| (c.check, c.path.as_str(), c.old.as_str(), c.new.as_str()))
        .collect()
}

#[test]
fn irq_apply_spreads_one_core_each_over_the_cpus() {
    let dir = queue_irqs(&SPREAD);
    let host = Host::at(dir.path()).with_cpus([8, 2, 5]);
    let changes = apply::run(&host, &needs_shards(3), Mode::Apply);
    let irqs = irq_changes(&changes);
    assert_eq!(irqs.len(), 6, "{changes:#?}");
    for ((irq, core), (check, path, old, new)) in SPREAD_TO.iter().zip(&irqs) {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{core}\n"), "{abs}");
        assert_eq!(*check, if *irq < 50 { "irq.nvme" } else { "irq.nic" });
        assert_eq!(*path, under(dir.path(), &abs).display().to_string());
        assert_eq!(*new, *core);
        let was = SPREAD.iter().find(|s| s.0 == *irq).expect("irq").2;
        assert_eq!(*old, was);
    }
    let c = find(&changes, "irq.nvme");
    assert_eq!(c.outcome, Outcome::Changed);
    let path = under(dir.path(), "/proc/irq/40/smp_affinity_list");
    assert_eq!(
        c.render(),
        format!(
            "irq.nvme: 0-15 -> 2 ({0})\n  undo: echo 0-15 > {0}",
            path.display()
        )
    );
    // IRQ 51 was pinned to 5 already but is moved to keep the spread even; its undo restores 5.
    let c51 = changes
        .iter()
        .find(|c| c.path.ends_with("/irq/51/smp_affinity_list"))
        .expect("51");
    assert!(c51.undo.starts_with("echo 5 > "), "{c51:?}");
    // One irqbalance line names every moved IRQ.
    let hints = apply::persist_hints(&changes);
    assert_eq!(hints.len(), 1, "{hints:?}");
    assert!(
        hints[0].contains(
            "IRQBALANCE_ARGS=\"--banirq=40 --banirq=41 --banirq=42 --banirq=43 --banirq=50 --banirq=51\""
        ),
        "{hints:?}"
    );
    // Now the checks pass and a second run changes nothing.
    for f in [
        keel_tuning::checks::irq_nvme(&host, &needs_shards(3)),
        keel_tuning::checks::irq_nic(&host, &needs_shards(3)),
    ] {
        assert_eq!(f.status, keel_tuning::Status::Ok, "{f:?}");
    }
    assert_eq!(
        irq_changes(&apply::run(&host, &needs_shards(3), Mode::Apply)),
        []
    );
    // The undo commands put every list back.
    for c in &changes {
        let status = Command::new("sh")
            .arg("-c")
            .arg(&c.undo)
            .status()
            .expect("sh");
        assert!(status.success(), "{}", c.undo);
    }
    for (irq, _, cpus) in SPREAD {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{cpus}\n"), "{abs}");
    }
}

#[test]
fn irq_dry_run_writes_nothing() {
    let dir = queue_irqs(&SPREAD);
    let host = Host::at(dir.path()).with_cpus([2, 5, 8]);
    let changes = apply::run(&host, &needs_shards(3), Mode::DryRun);
    let news: Vec<&str> = irq_changes(&changes).iter().map(|c| c.3).collect();
    assert_eq!(news, SPREAD_TO.map(|(_, core)| core));
    let irqs = changes.iter().filter(|c| c.check.starts_with("irq."));
    assert!(irqs.clone().count() == 6, "{changes:#?}");
    assert!(
        irqs.clone()
            .all(|c| c.outcome == Outcome::WouldChange && !c.undo.is_empty()),
        "{changes:#?}"
    );
    for (irq, _, cpus) in SPREAD {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{cpus}\n"), "{abs}");
    }
}

#[test]
fn irq_unwritable_is_reported_not_fatal() {
    let dir = queue_irqs(&SPREAD);
    // Readable but refused even to root, as a managed IRQ refuses (EIO) in a VM.
    let refused = under(dir.path(), "/proc/irq/42/smp_affinity_list");
    fs::remove_file(&refused).expect("rm");
    std::os::unix::fs::symlink("/proc/sys/kernel/ngroups_max", &refused).expect("symlink");
    let before = fs::read_to_string(&refused).expect("ngroups_max");
    let host = Host::at(dir.path()).with_cpus([2, 5, 8]);
    let changes = apply::run(&host, &needs_shards(3), Mode::Apply);

    let c = changes
        .iter()
        .find(|c| c.path.ends_with("/irq/42/smp_affinity_list"))
        .expect("42");
    assert!(matches!(c.outcome, Outcome::CannotChange(_)), "{c:?}");
    assert!(
        c.render().starts_with("irq.nvme: cannot change here ("),
        "{c:?}"
    );
    assert!(c.undo.is_empty() && c.persist.is_empty(), "{c:?}");
    assert_eq!(fs::read_to_string(&refused).expect("read"), before);
    // The others still moved, and the refused one is not banned from irqbalance.
    for (irq, core) in SPREAD_TO.iter().filter(|(irq, _)| *irq != 42) {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{core}\n"), "{abs}");
    }
    let hints = apply::persist_hints(&changes);
    assert!(!hints[0].contains("42"), "{hints:?}");
}

#[test]
fn irq_cannot_spread_over_one_core() {
    // One shard, no --cpus: the only core known is 0, and both queues already sit on it.
    let dir = queue_irqs(&[(40, "nvme0q1", "0"), (41, "nvme0q2", "0")]);
    let changes = apply::run(&Host::at(dir.path()), &needs_shards(1), Mode::Apply);
    let c = find(&changes, "irq.nvme");
    assert_eq!(
        c.render(),
        "irq.nvme: cannot change here (one core to spread 2 queue IRQs over (0); name the broker's cores with --cpus)"
    );
    // No NIC queues: said, not failed.
    assert!(
        find(&changes, "irq.nic")
            .render()
            .contains("no queue IRQs in /proc/interrupts"),
        "{changes:#?}"
    );
    assert_eq!(read(dir.path(), "/proc/irq/41/smp_affinity_list"), "0\n");
    // With the cores named, they spread.
    let host = Host::at(dir.path()).with_cpus([0, 1]);
    let changes = apply::run(&host, &needs_shards(1), Mode::Apply);
    assert_eq!(find(&changes, "irq.nvme").outcome, Outcome::Changed);
    assert_eq!(read(dir.path(), "/proc/irq/40/smp_affinity_list"), "0\n");
    assert_eq!(read(dir.path(), "/proc/irq/41/smp_affinity_list"), "1\n");
}

#[test]
fn persist_hints_for_each_kind_of_change() {
    let dir = untuned();
    let changes = apply::run(&Host::at(dir.path()), &needs(), Mode::DryRun);
    assert_eq!(
        find(&changes, "vm.swappiness").persist,
        "add `vm.swappiness = 1` to /etc/sysctl.d/90-keel.conf (sysctl --system loads it)"
    );
    assert_eq!(
        find(&changes, "fs.aio-max-nr").persist,
        "add `fs.aio-max-nr = 8192` to /etc/sysctl.d/90-keel.conf (sysctl --system loads it)"
    );
    assert_eq!(
        find(&changes, "disk.nomerges").persist,
        r#"add `ACTION=="add|change", SUBSYSTEM=="block", KERNEL=="nvme0n1", ATTR{queue/nomerges}="2"` to /etc/udev/rules.d/90-keel.rules"#
    );
    assert!(find(&changes, "cpu.governor")
        .persist
        .contains("cpupower frequency-set -g performance"));
    assert!(find(&changes, "mm.transparent_hugepage")
        .persist
        .contains("transparent_hugepage=madvise"));
    // One line each, the IRQ bans gathered last.
    let hints = apply::persist_hints(&changes);
    assert_eq!(hints.len(), 7, "{hints:#?}");
    assert!(
        hints[6].contains(r#"IRQBALANCE_ARGS="--banirq=40 --banirq=41 --banirq=50 --banirq=51""#),
        "{hints:#?}"
    );
}

#[test]
fn cli_irq_apply_with_cpus() {
    let dir = queue_irqs(&SPREAD);
    let root = dir.path().to_str().expect("utf-8");
    let args = [
        "--root",
        root,
        "--data-dir",
        "/data/keel",
        "--cpus",
        "2,5,8",
    ];
    let irq40 = under(dir.path(), "/proc/irq/40/smp_affinity_list");
    let line = format!("irq.nvme: 0-15 -> 2 ({})", irq40.display());
    let undo = format!("  undo: echo 0-15 > {}", irq40.display());

    let (rc, dry) = keel_tune(&[&args[..], &["--dry-run"]].concat());
    assert_eq!(rc, 0, "{dry}");
    for (irq, _, cpus) in SPREAD {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{cpus}\n"), "{abs}");
    }
    let (rc, applied) = keel_tune(&[&args[..], &["--apply"]].concat());
    assert_eq!(rc, 0, "{applied}");
    for (irq, core) in SPREAD_TO {
        let abs = format!("/proc/irq/{irq}/smp_affinity_list");
        assert_eq!(read(dir.path(), &abs), format!("{core}\n"), "{abs}");
    }
    for out in [&dry, &applied] {
        assert!(out.contains(&line) && out.contains(&undo), "{out}");
        assert!(
            out.contains("note: irqbalance, if it runs, may move these IRQs back"),
            "{out}"
        );
        assert!(
            out.contains(
                "to persist (none of this survives a reboot):\n  IRQ numbers can change at boot"
            ),
            "{out}"
        );
        // --shards defaults to the --cpus given, as the broker's smp = 0 does.
        assert!(out.contains(" · 3 shards on cores 2,5,8 · "), "{out}");
    }
    assert!(
        applied
            .lines()
            .any(|l| l.starts_with("irq.nvme") && l.contains("  ok")),
        "{applied}"
    );
}
