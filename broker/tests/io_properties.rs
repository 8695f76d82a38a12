//! `keel serve` and the io-properties file of `keel-tune iotune` (`io.properties.file`): the
//! I/O it sized from the file is logged (explicit settings win), a malformed or missing named
//! file is a clear error at start, and failing host checks are logged as warnings at start
//! without stopping it.

mod common;

use std::path::Path;
use std::process::Command;

use common::client::*;
use common::{free_port, Broker};

/// A valid file: 300 MB/s sequential writes, 4 ms median fdatasync, random-read IOPS
/// saturating at depth 16. On 2 shards: goal 4000 us; 300 MB/s x 4 ms = 1.2 MB, so 1 MiB
/// writes; 16 / 2 = 8 writes in flight per shard; 8 x 1 MiB = 8 MiB of io memory.
const PROPERTIES: &str = "\
mountpoint = \"/\"
device = \"testdisk\"
filesystem = \"ext4\"
data_dir = \"/nonexistent/keel-data\"
direct_io = true
note = \"\"
measured_at_unix_s = 1796000000
measured_at = \"2026-11-30T00:53:20Z\"
duration_ms = 10000
file_bytes = 1073741824
block_bytes = 4096
sequential_block_bytes = 131072
sequential_depth = 4
read_iops = 60000
read_bandwidth = 900000000
write_iops = 40000
write_iops_depth = 16
write_bandwidth = 300000000
fdatasync_p50_us = 4000
fdatasync_p99_us = 9000
fdatasync_max_us = 20000
fdatasync_samples = 500

[[random_read]]
depth = 1
iops = 5000

[[random_read]]
depth = 4
iops = 20000

[[random_read]]
depth = 16
iops = 58000

[[random_read]]
depth = 64
iops = 60000
";

fn write_properties(data_dir: &Path, text: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(data_dir).unwrap();
    let path = data_dir.join("io-properties.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn sized_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.contains("I/O sized from"))
        .unwrap_or_else(|| panic!("no sizing line; log:\n{log}"))
}

/// Produces and reads back a few batches: the bounded, resized writes still work.
fn round_trip(broker: &Broker) {
    let mut c = Client::connect(&broker.bootstrap());
    create_topic(&mut c, "sized", 2);
    for i in 0..20 {
        let v = vec![i as u8; 100_000];
        produce(&mut c, "sized", i % 2, batch(&[&v, b"tail"]));
    }
    let resp: kafka_protocol::messages::FetchResponse = c.send(
        kafka_protocol::messages::ApiKey::Fetch,
        12,
        &fetch_request("sized", &[(0, 0, 16 << 20)], 0, 0, 16 << 20),
    );
    let got = values(&resp.responses[0].partitions[0].records);
    assert_eq!(got.len(), 20, "10 batches of 2 records on partition 0");
}

#[test]
fn default_file_in_the_data_dir_sizes_the_io() {
    let mut broker = Broker::prepare(&[]);
    // Measured in a directory on another filesystem than the data dir's.
    let path = write_properties(
        &broker.data_dir(),
        &PROPERTIES.replace("/nonexistent/keel-data", "/proc"),
    );
    let from = broker.spawn_nowait();
    broker.wait_serving(from);
    let log = broker.log_text();
    let line = sized_line(&log);
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(line.contains("2026-11-30T00:53:20Z on testdisk"), "{line}");
    for derived in [
        "io.latency.goal.us=4000",
        "log.write.buffer.bytes=1048576",
        "log.write.inflight.shard.max=8",
        "io.memory.bytes=8388608",
    ] {
        assert!(line.contains(derived), "{derived} missing: {line}");
    }
    assert!(!line.contains("kept"), "{line}");
    // Measured on another filesystem: said, as a warning.
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("not under the data dir")),
        "{log}"
    );
    round_trip(&broker);
}

#[test]
fn explicit_settings_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_properties(dir.path(), PROPERTIES);
    let broker = Broker::start(&[
        "--set",
        &format!("io.properties.file={}", path.display()),
        "--set",
        "log.write.buffer.bytes=262144",
        "--set",
        "log.write.inflight.shard.max=1",
    ]);
    let log = broker.log_text();
    let line = sized_line(&log);
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(line.contains("log.write.buffer.bytes=262144"), "{line}");
    assert!(line.contains("log.write.inflight.shard.max=1"), "{line}");
    assert!(line.contains("io.latency.goal.us=4000"), "{line}");
    assert!(
        line.contains("kept: log.write.buffer.bytes, log.write.inflight.shard.max"),
        "{line}"
    );
    round_trip(&broker);
}

#[test]
fn no_file_says_so_and_off_skips_it() {
    let broker = Broker::start(&[]);
    let log = broker.log_text();
    assert!(log.contains("no io properties"), "{log}");
    assert!(!log.contains("I/O sized from"), "{log}");
    drop(broker);

    // A malformed default file is not read when the setting is off.
    let mut broker = Broker::prepare(&["--set", "io.properties.file=off"]);
    write_properties(&broker.data_dir(), "read_iops = \"fast\"\n");
    let from = broker.spawn_nowait();
    broker.wait_serving(from);
    let log = broker.log_text();
    assert!(!log.contains("I/O sized from"), "{log}");
    assert!(!log.contains("no io properties"), "{log}");
}

fn keel_fails_to_start(data_dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .env_remove("RUST_LOG")
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin", "off", "--smp", "1", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .output()
        .expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("shard serving"), "{stderr}");
    stderr
}

#[test]
fn malformed_or_missing_file_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    // A value of the wrong type.
    let path = write_properties(&data_dir, "read_iops = \"fast\"\n");
    let err = keel_fails_to_start(&data_dir, &[]);
    assert!(err.contains("keel: io.properties.file: "), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("re-run `keel-tune iotune`"), "{err}");
    // Well-formed TOML, impossible numbers: the field is named.
    write_properties(
        &data_dir,
        &PROPERTIES.replace("fdatasync_p99_us = 9000", "fdatasync_p99_us = 10"),
    );
    let err = keel_fails_to_start(&data_dir, &[]);
    assert!(
        err.contains("fdatasync_p50_us is above fdatasync_p99_us"),
        "{err}"
    );
    // Named but missing.
    let missing = dir.path().join("nope.toml");
    let err = keel_fails_to_start(
        &data_dir,
        &[
            "--set",
            &format!("io.properties.file={}", missing.display()),
        ],
    );
    assert!(err.contains(&missing.display().to_string()), "{err}");
    // The derived settings' own bounds are checked like any setting.
    let err = keel_fails_to_start(&data_dir, &["--set", "log.write.buffer.bytes=100"]);
    assert!(
        err.contains("log.write.buffer.bytes must be between"),
        "{err}"
    );
}

#[test]
fn failing_host_checks_are_warnings_at_start() {
    // An open-files limit far below what 1000 partitions need fails rlimit.nofile on any
    // host. Lowered for this test process, so the broker it starts inherits it (lowering
    // needs no privilege; 4096 is plenty for these tests' brokers).
    let lim = libc::rlimit {
        rlim_cur: 4096,
        rlim_max: 4096,
    };
    // SAFETY: setrlimit with a valid pointer to a local struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let broker = Broker::start(&[]);
    let log = broker.log_text();
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("host check failed: rlimit.nofile"))
        .unwrap_or_else(|| panic!("no host check warning; log:\n{log}"));
    assert!(warning.contains("soft 4096 / hard 4096"), "{warning}");
    assert!(warning.contains("fix: "), "{warning}");
    assert!(
        log.lines()
            .any(|l| l.contains("INFO") && l.contains("host checks: 16 checks: ")),
        "{log}"
    );
    // Checks that cannot be read here (VMs, containers) are never warnings.
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("not readable")),
        "{log}"
    );
    // Warnings do not stop the broker: it serves.
    let mut c = Client::connect(&broker.bootstrap());
    create_topic(&mut c, "checked", 1);
    produce(&mut c, "checked", 0, batch(&[b"ok"]));
}
