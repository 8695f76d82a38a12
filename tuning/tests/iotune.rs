//! `keel-tune iotune` on a temp dir with a short duration: the io-properties file it writes
//! holds every field, positive and plausible, and the probe file is gone afterwards. The temp
//! dir is made beside the crate (on the disk the workspace lives on), not in /tmp, which may
//! be a tmpfs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_tuning::iotune::{IoProperties, READ_DEPTHS, WRITE_IOPS_DEPTH};

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

/// A temp dir on the workspace's disk.
fn disk_temp_dir() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tempfile::tempdir_in(base).expect("temp dir")
}

#[test]
fn iotune_writes_a_plausible_file() {
    let dir = disk_temp_dir();
    let data_dir = dir.path().join("data");
    let started = Instant::now();
    let (rc, stdout, stderr) = keel_tune(&[
        "iotune",
        "--data-dir",
        data_dir.to_str().expect("utf-8"),
        "--duration",
        "1500ms",
        "--file-bytes-max",
        "67108864",
    ]);
    let took = started.elapsed();
    assert_eq!(rc, 0, "{stdout}{stderr}");
    assert!(
        took < Duration::from_secs(10),
        "a 1.5 s run took {took:?}: {stderr}"
    );
    // The default place, which keel serve reads.
    let path = data_dir.join("io-properties.toml");
    assert!(
        stderr.contains(&format!("wrote {}", path.display())),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&path).expect("io-properties written");
    assert_eq!(stdout, text);
    for field in [
        "mountpoint",
        "device",
        "filesystem",
        "data_dir",
        "direct_io",
        "measured_at",
        "measured_at_unix_s",
        "duration_ms",
        "file_bytes",
        "block_bytes",
        "sequential_block_bytes",
        "read_iops",
        "read_bandwidth",
        "write_iops",
        "write_iops_depth",
        "write_bandwidth",
        "fdatasync_p50_us",
        "fdatasync_p99_us",
        "fdatasync_max_us",
        "fdatasync_samples",
        "[[random_read]]",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{field} ")) || l == field),
            "{field} missing:\n{text}"
        );
    }
    let p = IoProperties::from_toml(&text).expect("valid io-properties");
    // Positive, and in plausible relation to each other.
    assert!(p.read_iops > 0 && p.write_iops > 0, "{text}");
    assert!(p.read_bandwidth > 0 && p.write_bandwidth > 0, "{text}");
    assert_eq!(p.block_bytes, 4096);
    assert_eq!(p.write_iops_depth, WRITE_IOPS_DEPTH);
    let depths: Vec<u32> = p.random_read.iter().map(|d| d.depth).collect();
    assert_eq!(depths, READ_DEPTHS, "{text}");
    assert!(p.random_read.iter().all(|d| d.iops > 0), "{text}");
    assert_eq!(
        p.read_iops,
        p.random_read.iter().map(|d| d.iops).max().unwrap_or(0),
        "read_iops is the best depth's"
    );
    assert!(READ_DEPTHS.contains(&p.saturating_depth()));
    assert!(
        p.fdatasync_p50_us <= p.fdatasync_p99_us && p.fdatasync_p99_us <= p.fdatasync_max_us,
        "{text}"
    );
    assert!(p.fdatasync_samples >= 1, "{text}");
    assert!(p.duration_ms >= 1000 && p.duration_ms < 10_000, "{text}");
    assert!(p.file_bytes > 0 && p.file_bytes <= 64 << 20, "{text}");
    assert!(p.measured_at.ends_with('Z'), "{text}");
    assert!(p.data_dir.ends_with("data"), "{text}");
    if !p.direct_io {
        assert!(p.note.contains("O_DIRECT"), "{text}");
    }
    // Only the properties file is left behind: the probe file is gone.
    let left: Vec<String> = std::fs::read_dir(&data_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["io-properties.toml".to_string()]);
}

#[test]
fn iotune_out_flag_and_bad_arguments() {
    let dir = disk_temp_dir();
    let out = dir.path().join("props.toml");
    let (rc, _, stderr) = keel_tune(&[
        "iotune",
        "--data-dir",
        dir.path().to_str().expect("utf-8"),
        "--duration",
        "400ms",
        "--file-bytes-max",
        "8388608",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(rc, 0, "{stderr}");
    IoProperties::load(&out).expect("valid io-properties at --out");
    assert!(!dir.path().join("io-properties.toml").exists());

    let (rc, _, stderr) = keel_tune(&["iotune", "--duration", "soon"]);
    assert_eq!(rc, 2);
    assert!(stderr.contains("not a duration"), "{stderr}");
    let (rc, _, stderr) = keel_tune(&["iotune", "--bogus", "1"]);
    assert_eq!(rc, 2);
    assert!(stderr.contains("unknown argument: --bogus"), "{stderr}");
}

#[test]
fn malformed_properties_are_rejected_with_the_field() {
    let dir = disk_temp_dir();
    let path = dir.path().join("io-properties.toml");
    std::fs::write(&path, "read_iops = \"fast\"\n").expect("write");
    let err = IoProperties::load(&path).expect_err("malformed");
    assert!(err.contains("io-properties.toml"), "{err}");
    let good = "mountpoint = \"/\"\ndevice = \"vda\"\nfilesystem = \"ext4\"\ndata_dir = \"/d\"\n\
        direct_io = true\nmeasured_at_unix_s = 1\nmeasured_at = \"1970-01-01T00:00:01Z\"\n\
        duration_ms = 1000\nfile_bytes = 1048576\nblock_bytes = 4096\n\
        sequential_block_bytes = 131072\nsequential_depth = 4\nread_iops = 1000\n\
        read_bandwidth = 1000000\nwrite_iops = 500\nwrite_iops_depth = 16\n\
        write_bandwidth = 1000000\nfdatasync_p50_us = 900\nfdatasync_p99_us = 800\n\
        fdatasync_max_us = 1000\nfdatasync_samples = 10\n\
        [[random_read]]\ndepth = 1\niops = 1000\n";
    let err = IoProperties::from_toml(good).expect_err("p50 above p99");
    assert!(err.contains("fdatasync_p50_us"), "{err}");
    let fixed = good.replace("fdatasync_p99_us = 800", "fdatasync_p99_us = 950");
    let p = IoProperties::from_toml(&fixed).expect("valid");
    assert_eq!(p.saturating_depth(), 1);
    let err =
        IoProperties::from_toml(&fixed.replace("write_iops = 500\n", "")).expect_err("missing");
    assert!(err.contains("write_iops"), "{err}");
}
