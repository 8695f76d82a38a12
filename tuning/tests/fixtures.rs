//! Each check against fixture trees of `/proc` and `/sys` content built in a temp dir: good,
//! bad, and unreadable (missing, or a directory where a file should be — which defeats root's
//! permission bypass). Also the table and JSON renderings.

mod common;

use std::fs;
use std::path::PathBuf;

use common::ALL_CHECKS;
use keel_tuning::{checks, report, run_all, Finding, Host, Limit, Needs, Rlimit, Status};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn file(&self, abs: &str, content: &str) -> &Fixture {
        let path = self.path(abs);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, content).expect("write");
        self
    }

    /// A directory where the check expects a file: reading it fails even as root.
    fn unreadable(&self, abs: &str) -> &Fixture {
        fs::create_dir_all(self.path(abs)).expect("mkdir");
        self
    }

    fn dir(&self, abs: &str) -> &Fixture {
        fs::create_dir_all(self.path(abs)).expect("mkdir");
        self
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.dir.path().join(abs.trim_start_matches('/'))
    }

    /// `/proc/interrupts` lines (appended) and each IRQ's `smp_affinity_list`.
    fn interrupts(&self, irqs: &[(u64, &str, &str)]) -> &Fixture {
        let path = self.path("/proc/interrupts");
        let mut content = fs::read_to_string(&path)
            .unwrap_or_else(|_| "           CPU0       CPU1       CPU2       CPU3\n".to_string());
        for (irq, name, cpus) in irqs {
            content.push_str(&format!(
                "{irq:>4}:  10  0  0  0  PCI-MSIX-0000:00:04.0  1-edge  {name}\n"
            ));
            self.file(
                &format!("/proc/irq/{irq}/smp_affinity_list"),
                &format!("{cpus}\n"),
            );
        }
        content.push_str(" NMI:   0   0   0   0   Non-maskable interrupts\n");
        self.file("/proc/interrupts", &content)
    }

    /// A ballast of `bytes` written out (allocated, not sparse).
    fn ballast(&self, abs: &str, bytes: u64) -> &Fixture {
        let len = usize::try_from(bytes).expect("small");
        self.file(abs, &"x".repeat(len));
        fs::File::open(self.path(abs))
            .and_then(|f| f.sync_all())
            .expect("sync");
        self
    }

    fn host(&self) -> Host {
        Host::at(self.dir.path()).with_rlimits(None, None)
    }

    /// An NVMe data disk holding `/data`, partitioned, with the given queue knobs.
    fn nvme(
        &self,
        scheduler: &str,
        nomerges: &str,
        rq_affinity: &str,
        write_cache: &str,
    ) -> &Fixture {
        self.file(
            "/proc/mounts",
            "/dev/sda1 / ext4 rw 0 0\n/dev/nvme0n1p1 /data xfs rw,noatime 0 0\n",
        )
        .dir("/sys/block/sda/sda1")
        .dir("/sys/block/nvme0n1/nvme0n1p1")
        .file("/sys/block/nvme0n1/queue/rotational", "0\n")
        .file("/sys/block/nvme0n1/queue/scheduler", scheduler)
        .file("/sys/block/nvme0n1/queue/nomerges", nomerges)
        .file("/sys/block/nvme0n1/queue/rq_affinity", rq_affinity)
        .file("/sys/block/nvme0n1/queue/write_cache", write_cache)
    }
}

fn needs() -> Needs {
    Needs {
        data_dir: PathBuf::from("/data/keel"),
        shards: 4,
        partitions: 1000,
        io_memory_bytes: Needs::IO_MEMORY_BYTES_DEFAULT,
        ballast_path: None,
        ballast_bytes_min: BALLAST_BYTES,
    }
}

/// Small, so fixtures hold a real (not sparse) ballast.
const BALLAST_BYTES: u64 = 64 * 1024;

fn find<'a>(findings: &'a [Finding], check: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.check == check)
        .unwrap_or_else(|| panic!("no {check} in {findings:?}"))
}

fn assert_unknown(f: &Finding) {
    assert_eq!(f.status, Status::Unknown, "{f:?}");
    assert!(!f.current.is_empty() && !f.fix.is_empty(), "{f:?}");
}

#[test]
fn governor_good_bad_unreadable() {
    let good = Fixture::new();
    good.file(
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "performance\n",
    )
    .file(
        "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "performance\n",
    )
    .dir("/sys/devices/system/cpu/cpufreq")
    .dir("/sys/devices/system/cpu/cpuidle");
    let f = checks::governor(&good.host());
    assert_eq!(
        (f.status, f.current.as_str(), f.fix.as_str()),
        (Status::Ok, "performance", "")
    );

    let bad = Fixture::new();
    bad.file(
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "performance\n",
    )
    .file(
        "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "powersave\n",
    );
    let f = checks::governor(&bad.host());
    assert_eq!(f.status, Status::Warn);
    assert!(f.current.contains("powersave (1/2 cpus)"), "{f:?}");
    assert!(f.fix.contains("cpupower frequency-set -g performance"));

    let unreadable = Fixture::new();
    unreadable.unreadable("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    assert_unknown(&checks::governor(&unreadable.host()));
    assert_unknown(&checks::governor(&Fixture::new().host()));
}

#[test]
fn disk_queue_good() {
    let fx = Fixture::new();
    fx.nvme(
        "[none] mq-deadline kyber\n",
        "2\n",
        "2\n",
        "write through\n",
    );
    let findings = run_all(&fx.host(), &needs());
    for check in [
        "disk.scheduler",
        "disk.nomerges",
        "disk.rq_affinity",
        "disk.write_cache",
    ] {
        assert_eq!(
            find(&findings, check).status,
            Status::Ok,
            "{:?}",
            find(&findings, check)
        );
    }
    assert_eq!(find(&findings, "disk.scheduler").current, "none");
    assert!(find(&findings, "disk.scheduler")
        .recommended
        .contains("nvme0n1, NVMe"));
}

#[test]
fn disk_queue_bad() {
    let fx = Fixture::new();
    fx.nvme("none [mq-deadline] kyber\n", "0\n", "1\n", "write back\n");
    let findings = run_all(&fx.host(), &needs());
    let sched = find(&findings, "disk.scheduler");
    assert_eq!(
        (sched.status, sched.current.as_str()),
        (Status::Warn, "mq-deadline")
    );
    assert!(
        sched
            .fix
            .contains("echo none > /sys/block/nvme0n1/queue/scheduler"),
        "{sched:?}"
    );
    let merges = find(&findings, "disk.nomerges");
    assert_eq!(
        (merges.status, merges.current.as_str()),
        (Status::Warn, "0")
    );
    assert!(merges
        .fix
        .contains("echo 2 > /sys/block/nvme0n1/queue/nomerges"));
    assert_eq!(find(&findings, "disk.rq_affinity").status, Status::Warn);
    let cache = find(&findings, "disk.write_cache");
    assert_eq!(
        (cache.status, cache.current.as_str()),
        (Status::Warn, "write back")
    );
    assert!(cache.fix.contains("power-loss protection"));
}

#[test]
fn disk_queue_unreadable() {
    // Knobs unreadable or garbage.
    let fx = Fixture::new();
    fx.nvme("", "lots\n", "", "");
    fs::remove_file(fx.path("/sys/block/nvme0n1/queue/rq_affinity")).expect("rm");
    fx.unreadable("/sys/block/nvme0n1/queue/rq_affinity");
    fs::remove_file(fx.path("/sys/block/nvme0n1/queue/write_cache")).expect("rm");
    fs::remove_file(fx.path("/sys/block/nvme0n1/queue/scheduler")).expect("rm");
    let findings = run_all(&fx.host(), &needs());
    for check in [
        "disk.scheduler",
        "disk.nomerges",
        "disk.rq_affinity",
        "disk.write_cache",
    ] {
        assert_unknown(find(&findings, check));
    }
    // The data dir on a mount with no block device (a container's overlay).
    let overlay = Fixture::new();
    overlay.file("/proc/mounts", "overlay / overlay rw 0 0\n");
    let findings = run_all(&overlay.host(), &needs());
    let sched = find(&findings, "disk.scheduler");
    assert_unknown(sched);
    assert!(sched.current.contains("not a block device"), "{sched:?}");
}

#[test]
fn whole_disk_mount_and_spinning_disk() {
    let fx = Fixture::new();
    fx.file("/proc/mounts", "/dev/sdb /data ext4 rw 0 0\n")
        .file("/sys/block/sdb/queue/rotational", "1\n")
        .file("/sys/block/sdb/queue/scheduler", "[mq-deadline] none\n");
    let findings = run_all(&fx.host(), &needs());
    let f = find(&findings, "disk.scheduler");
    assert_eq!((f.check, f.status), ("disk.scheduler", Status::Ok), "{f:?}");
    assert!(f.recommended.starts_with("mq-deadline"));
}

fn one_file_check(path: &str, good: &str, bad: &str, check: fn(&Host) -> Finding, bad_fix: &str) {
    let fx = Fixture::new();
    fx.file(path, good);
    let f = check(&fx.host());
    assert_eq!(f.status, Status::Ok, "{f:?}");
    let fx = Fixture::new();
    fx.file(path, bad);
    let f = check(&fx.host());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.fix.contains(bad_fix), "{f:?}");
    let fx = Fixture::new();
    fx.unreadable(path);
    assert_unknown(&check(&fx.host()));
    assert_unknown(&check(&Fixture::new().host()));
}

#[test]
fn swappiness_good_bad_unreadable() {
    one_file_check(
        "/proc/sys/vm/swappiness",
        "1\n",
        "60\n",
        checks::swappiness,
        "vm.swappiness=1",
    );
    let fx = Fixture::new();
    fx.file("/proc/sys/vm/swappiness", "sixty");
    assert_unknown(&checks::swappiness(&fx.host()));
}

#[test]
fn transparent_hugepages_good_bad_unreadable() {
    const PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    one_file_check(
        PATH,
        "always [madvise] never\n",
        "[always] madvise never\n",
        checks::transparent_hugepages,
        "echo madvise",
    );
    let fx = Fixture::new();
    fx.file(PATH, "always madvise [never]\n");
    assert_eq!(checks::transparent_hugepages(&fx.host()).current, "never");
}

#[test]
fn clocksource_good_bad_unreadable() {
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    one_file_check(
        &format!("{DIR}/current_clocksource"),
        "tsc\n",
        "hpet\n",
        checks::clocksource,
        "available_clocksource",
    );
    let fx = Fixture::new();
    fx.file(&format!("{DIR}/current_clocksource"), "kvm-clock\n")
        .file(
            &format!("{DIR}/available_clocksource"),
            "kvm-clock tsc acpi_pm\n",
        );
    let f = checks::clocksource(&fx.host());
    assert_eq!((f.status, f.current.as_str()), (Status::Warn, "kvm-clock"));
    assert!(f.fix.starts_with("echo tsc > "), "{f:?}");
}

#[test]
fn aio_max_nr_good_bad_unreadable() {
    const PATH: &str = "/proc/sys/fs/aio-max-nr";
    let n = needs(); // 4 shards: 4 x 1024 + 4096 = 8192
    let fx = Fixture::new();
    fx.file(PATH, "8192\n");
    let f = checks::aio_max_nr(&fx.host(), &n);
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.recommended.starts_with(">= 8192"));
    let fx = Fixture::new();
    fx.file(PATH, "8191\n");
    let f = checks::aio_max_nr(&fx.host(), &n);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.fix.contains("sysctl -w fs.aio-max-nr=8192"));
    let fx = Fixture::new();
    fx.unreadable(PATH);
    assert_unknown(&checks::aio_max_nr(&fx.host(), &n));
}

fn limits(soft: Limit, hard: Limit) -> Option<Rlimit> {
    Some(Rlimit { soft, hard })
}

#[test]
fn memlock_levels() {
    let n = needs(); // need 4 x 3 x 4 MiB = 48 MiB; floor 4 x 3 x 64 KiB = 768 KiB
    let fx = Fixture::new();
    let with = |m| checks::memlock(&Host::at(fx.dir.path()).with_rlimits(m, None), &n);
    let mib = |v: u64| Limit::Finite(v << 20);
    assert_eq!(
        with(limits(Limit::Unlimited, Limit::Unlimited)).status,
        Status::Ok
    );
    assert_eq!(with(limits(mib(48), mib(48))).status, Status::Ok);
    let f = with(limits(mib(8), Limit::Unlimited));
    assert_eq!(f.status, Status::Warn);
    assert!(f.fix.contains("raises its soft limit"), "{f:?}");
    let f = with(limits(mib(8), mib(8)));
    assert_eq!(f.status, Status::Warn);
    assert!(f.fix.contains("shrink io.memory.bytes"), "{f:?}");
    let f = with(limits(Limit::Finite(65536), Limit::Finite(65536)));
    assert_eq!(f.status, Status::Fail);
    assert_eq!(f.current, "soft 65536 / hard 65536");
    assert_unknown(&with(None));
}

#[test]
fn nofile_levels() {
    let n = needs(); // need 1000 x 8 + 16384 = 24384
    let fx = Fixture::new();
    let with = |l| checks::nofile(&Host::at(fx.dir.path()).with_rlimits(None, l), &n);
    assert_eq!(
        with(limits(Limit::Finite(24384), Limit::Finite(24384))).status,
        Status::Ok
    );
    let f = with(limits(Limit::Finite(1024), Limit::Finite(1 << 20)));
    assert_eq!(f.status, Status::Warn);
    assert!(f.fix.contains("ulimit -n 24384"), "{f:?}");
    let f = with(limits(Limit::Finite(1024), Limit::Finite(4096)));
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.contains("LimitNOFILE=24384"), "{f:?}");
    assert_unknown(&with(None));
}

#[test]
fn live_limits_are_read() {
    let f = checks::nofile(&Host::at("/nonexistent"), &needs());
    assert_ne!(
        f.status,
        Status::Unknown,
        "getrlimit should work here: {f:?}"
    );
    assert!(f.current.starts_with("soft "));
}

#[test]
fn filesystem_good_bad_unreadable() {
    let fx = Fixture::new();
    fx.file(
        "/proc/mounts",
        "/dev/sda1 / ext4 rw 0 0\n/dev/nvme0n1p1 /data xfs rw,noatime 0 0\n",
    );
    let f = checks::filesystem(&fx.host(), &needs());
    assert_eq!(
        (f.status, f.current.as_str()),
        (Status::Ok, "xfs on /data (rw,noatime)")
    );
    // The longest matching mount point wins; /database is not under /data.
    let fx = Fixture::new();
    fx.file(
        "/proc/mounts",
        "/dev/sda1 / ext4 rw 0 0\n/dev/sdc1 /database btrfs rw 0 0\ntmpfs /data tmpfs rw 0 0\n",
    );
    let f = checks::filesystem(&fx.host(), &needs());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.current.starts_with("tmpfs on /data"), "{f:?}");
    assert!(f.fix.contains("xfs"));
    let fx = Fixture::new();
    fx.unreadable("/proc/mounts");
    assert_unknown(&checks::filesystem(&fx.host(), &needs()));
    assert_unknown(&checks::filesystem(&Fixture::new().host(), &needs()));
}

/// A fully tuned host: every check ok.
fn good_host() -> Fixture {
    let fx = Fixture::new();
    fx.nvme("[none] mq-deadline\n", "2\n", "2\n", "write through\n")
        .file(
            "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            "performance\n",
        )
        .file("/proc/sys/vm/swappiness", "1\n")
        .file(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        )
        .file(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "tsc\n",
        )
        .file("/proc/sys/fs/aio-max-nr", "1048576\n")
        .interrupts(&[
            (40, "nvme0q0", "0"),
            (41, "nvme0q1", "1"),
            (42, "nvme0q2", "2-3"),
            (50, "virtio2-input.0", "2"),
            (51, "virtio2-output.0", "3"),
        ])
        .ballast("/data/keel/ballast", 2 * BALLAST_BYTES);
    fx
}

#[test]
fn good_host_all_ok_and_table() {
    let fx = good_host();
    let unlimited = limits(Limit::Unlimited, Limit::Unlimited);
    let host = Host::at(fx.dir.path()).with_rlimits(unlimited, unlimited);
    let findings = run_all(&host, &needs());
    let names: Vec<&str> = findings.iter().map(|f| f.check).collect();
    assert_eq!(names, ALL_CHECKS);
    assert!(
        findings.iter().all(|f| f.status == Status::Ok),
        "{findings:#?}"
    );

    let table = report::table(&findings);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 18, "{table}");
    assert!(
        lines[0].starts_with("CHECK") && lines[0].ends_with("FIX"),
        "{table}"
    );
    // Columns line up: STATUS starts at the same offset on every row.
    let status_at = lines[0].find("STATUS").expect("STATUS header");
    for (line, f) in lines[1..17].iter().zip(&findings) {
        assert!(line.starts_with(f.check), "{line}");
        assert_eq!(&line[status_at..status_at + 2], "ok", "{line}");
    }
    assert_eq!(lines[17], "16 checks: 16 ok, 0 warn, 0 fail, 0 unknown");
}

#[test]
fn empty_host_all_unknown_and_json() {
    let fx = Fixture::new();
    let findings = run_all(&fx.host(), &needs());
    assert_eq!(findings.len(), ALL_CHECKS.len());
    for f in &findings {
        assert_unknown(f);
    }
    let json: serde_json::Value =
        serde_json::from_str(&report::json(&Host::at("/fixture"), &needs(), &findings))
            .expect("valid JSON");
    assert_eq!(json["root"], "/fixture");
    assert_eq!(json["data_dir"], "/data/keel");
    assert_eq!(json["shards"], 4);
    let rows = json["checks"].as_array().expect("checks array");
    assert_eq!(rows.len(), 16);
    for (row, name) in rows.iter().zip(ALL_CHECKS) {
        assert_eq!(row["check"], name);
        assert_eq!(row["status"], "unknown");
        for key in ["current", "recommended", "fix"] {
            assert!(row[key].is_string(), "{row}");
        }
    }
    assert!(report::table(&findings).ends_with("16 checks: 0 ok, 0 warn, 0 fail, 16 unknown\n"));
}

#[test]
fn bad_host_json_statuses() {
    let fx = Fixture::new();
    fx.nvme("[kyber] none\n", "0\n", "1\n", "write back\n")
        .file(
            "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            "powersave\n",
        )
        .file("/proc/sys/vm/swappiness", "60\n")
        .file(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never\n",
        )
        .file(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "hpet\n",
        )
        .file("/proc/sys/fs/aio-max-nr", "1024\n")
        .interrupts(&[(40, "nvme0q1", "0-3"), (41, "nvme0q2", "0-3")])
        .interrupts(&[(50, "eth0-TxRx-0", "0"), (51, "eth0-TxRx-1", "0")])
        .dir("/data/keel");
    let tiny = limits(Limit::Finite(1024), Limit::Finite(1024));
    let host = Host::at(fx.dir.path()).with_rlimits(tiny, tiny);
    let findings = run_all(&host, &needs());
    let json: serde_json::Value =
        serde_json::from_str(&report::json(&host, &needs(), &findings)).expect("valid JSON");
    let status: Vec<&str> = json["checks"]
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["status"].as_str().expect("str"))
        .collect();
    assert_eq!(
        status,
        [
            "warn", "warn", "warn", "warn", "warn", "warn", "warn", "warn", "warn", "warn", "fail",
            "fail", "fail", "ok", "ok", "warn"
        ]
    );
    for row in json["checks"].as_array().expect("array") {
        if row["status"] != "ok" {
            assert!(!row["fix"].as_str().expect("fix").is_empty(), "{row}");
        }
    }
}

#[test]
fn irq_affinity_good_bad_unreadable() {
    let good = Fixture::new();
    good.interrupts(&[
        (40, "nvme0q0", "0"),
        (41, "nvme0q1", "1"),
        (50, "mlx5_comp0@pci:0000:00:08.0", "2"),
        (51, "mlx5_comp1@pci:0000:00:08.0", "3"),
    ]);
    for f in [
        checks::irq_nvme(&good.host(), &needs()),
        checks::irq_nic(&good.host(), &needs()),
    ] {
        assert_eq!((f.status, f.fix.as_str()), (Status::Ok, ""), "{f:?}");
        assert!(f.current.starts_with("2 queue IRQs"), "{f:?}");
    }

    // Unpinned: may fire on every shard core (0-3 of 4 shards).
    let every = Fixture::new();
    every.interrupts(&[(40, "nvme0q0", "0-7"), (41, "nvme0q1", "3")]);
    let f = checks::irq_nvme(&every.host(), &needs());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(
        f.current
            .contains("1 may fire on every shard core 0-3 (e.g. IRQ 40)"),
        "{f:?}"
    );
    assert!(f.fix.contains("/proc/irq/40/smp_affinity_list"), "{f:?}");

    // All queues on one core.
    let one = Fixture::new();
    one.interrupts(&[(50, "ens5-rx-0", "1"), (51, "ens5-tx-0", "1")]);
    let f = checks::irq_nic(&one.host(), &needs());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.current.contains("all on cpu 1"), "{f:?}");
    // No NVMe queue there: unknown, as in a VM with a virtio disk.
    assert_unknown(&checks::irq_nvme(&one.host(), &needs()));

    // Named, but no readable affinity (a directory where the file should be).
    let unreadable = Fixture::new();
    unreadable.interrupts(&[(40, "nvme0q0", "0")]);
    fs::remove_file(unreadable.path("/proc/irq/40/smp_affinity_list")).expect("rm");
    unreadable.unreadable("/proc/irq/40/smp_affinity_list");
    let f = checks::irq_nvme(&unreadable.host(), &needs());
    assert_unknown(&f);
    assert!(f.current.contains("no readable smp_affinity_list"), "{f:?}");
    // No /proc/interrupts at all.
    assert_unknown(&checks::irq_nic(&Fixture::new().host(), &needs()));
    let dir = Fixture::new();
    dir.unreadable("/proc/interrupts");
    assert_unknown(&checks::irq_nic(&dir.host(), &needs()));
}

#[test]
fn shard_cores_from_the_allowed_cpus() {
    let fixture = Fixture::new();
    let with_shards = |shards| Needs { shards, ..needs() };
    // A fixture root without --cpus: unknown, so the first `shards` cores.
    assert_eq!(fixture.host().allowed_cpus(), None);
    assert_eq!(with_shards(4).shard_cores(&fixture.host()), [0, 1, 2, 3]);
    // --cpus: shard i on the i-th allowed core, ascending; more shards than cores wrap, so the
    // shard cores are all of them.
    let host = fixture.host().with_cpus([8, 3, 1, 3]);
    assert_eq!(host.allowed_cpus(), Some(vec![1, 3, 8]));
    assert_eq!(with_shards(2).shard_cores(&host), [1, 3]);
    assert_eq!(with_shards(10).shard_cores(&host), [1, 3, 8]);
    // The live host: this process's mask, as /proc/self/status says it.
    let status = fs::read_to_string("/proc/self/status").expect("status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let allowed: Vec<u64> = checks::parse_cpu_list(list)
        .expect("cpu list")
        .into_iter()
        .collect();
    assert_eq!(Host::live().allowed_cpus(), Some(allowed.clone()));
    assert_eq!(with_shards(1).shard_cores(&Host::live()), allowed[..1]);
}

#[test]
fn irq_judged_against_the_shard_cores_given() {
    // A broker under `taskset -c 4-7`: a queue IRQ on 4-7 fires on every shard core.
    let f = Fixture::new();
    f.interrupts(&[(40, "nvme0q1", "4-7"), (41, "nvme0q2", "4-7")]);
    let finding = checks::irq_nvme(&f.host().with_cpus(4..8), &needs());
    assert_eq!(finding.status, Status::Warn, "{finding:?}");
    assert!(
        finding
            .current
            .contains("2 may fire on every shard core 4-7 (e.g. IRQ 40)"),
        "{finding:?}"
    );
    // Assumed on 0-3, the same IRQs miss every shard core.
    assert_eq!(checks::irq_nvme(&f.host(), &needs()).status, Status::Ok);
    // Non-contiguous cores are named as a cpu list.
    let finding = checks::irq_nvme(&f.host().with_cpus([4, 6]), &needs());
    assert!(
        finding.current.contains("every shard core 4,6 "),
        "{finding:?}"
    );
}

#[test]
fn mount_options_good_bad_unreadable() {
    let good = Fixture::new();
    good.nvme("none", "2", "2", "write through");
    let f = checks::mount_options(&good.host(), &needs());
    assert_eq!(
        (f.status, f.current.as_str()),
        (Status::Ok, "rw,noatime on /data")
    );

    for options in ["rw,relatime", "rw"] {
        let bad = Fixture::new();
        bad.file(
            "/proc/mounts",
            &format!("/dev/nvme0n1 /data xfs {options} 0 0\n"),
        );
        let f = checks::mount_options(&bad.host(), &needs());
        assert_eq!(f.status, Status::Warn, "{f:?}");
        assert!(f.fix.starts_with("mount -o remount,noatime /data"), "{f:?}");
    }

    let unreadable = Fixture::new();
    unreadable.unreadable("/proc/mounts");
    assert_unknown(&checks::mount_options(&unreadable.host(), &needs()));
    assert_unknown(&checks::mount_options(&Fixture::new().host(), &needs()));
}

#[test]
fn ballast_good_bad_unreadable() {
    let good = Fixture::new();
    good.ballast("/data/keel/ballast", BALLAST_BYTES);
    let f = checks::ballast(&good.host(), &needs());
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.current.ends_with("bytes allocated"), "{f:?}");

    // `--ballast PATH` elsewhere; the default path is then not looked at.
    let elsewhere = Fixture::new();
    elsewhere.ballast("/var/keel-ballast", BALLAST_BYTES);
    let mut custom = needs();
    custom.ballast_path = Some(PathBuf::from("/var/keel-ballast"));
    assert_eq!(
        checks::ballast(&elsewhere.host(), &custom).status,
        Status::Ok
    );

    // Missing: warn, and the fix is the fallocate command (1 GiB by default).
    let missing = Fixture::new();
    missing.dir("/data/keel");
    let mut gib = needs();
    gib.ballast_bytes_min = Needs::BALLAST_BYTES_DEFAULT;
    let f = checks::ballast(&missing.host(), &gib);
    assert_eq!((f.status, f.current.as_str()), (Status::Warn, "missing"));
    assert_eq!(f.fix, "fallocate -l 1G /data/keel/ballast");

    // Too small, and sparse: long enough but holding no blocks.
    let small = Fixture::new();
    small.ballast("/data/keel/ballast", 4096);
    let f = checks::ballast(&small.host(), &needs());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert_eq!(
        f.fix,
        "rm /data/keel/ballast && fallocate -l 65536 /data/keel/ballast"
    );
    let sparse = Fixture::new();
    sparse.dir("/data/keel");
    fs::File::create(sparse.path("/data/keel/ballast"))
        .and_then(|f| f.set_len(BALLAST_BYTES * 16))
        .expect("sparse file");
    let f = checks::ballast(&sparse.host(), &needs());
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.current.contains("bytes long"), "{f:?}");

    // A directory where the file should be: unknown. No data dir yet: unknown, says to make it.
    let unreadable = Fixture::new();
    unreadable.unreadable("/data/keel/ballast");
    assert_unknown(&checks::ballast(&unreadable.host(), &needs()));
    let f = checks::ballast(&Fixture::new().host(), &needs());
    assert_unknown(&f);
    assert!(
        f.fix.starts_with("mkdir -p /data/keel && fallocate"),
        "{f:?}"
    );
}
