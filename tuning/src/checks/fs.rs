//! The data dir's filesystem: its type (Keel's segments are tested on xfs and ext4), its mount
//! options (`noatime`: a read should not write an inode), and a ballast file that can be deleted
//! to win back room when the disk fills.

use crate::check::{Finding, Needs, Status};
use crate::host::Host;
use crate::mounts;

pub fn filesystem(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "fs.type";
    const WANT: &str = "xfs or ext4";
    let mount = match mounts::mount_of(host, &needs.data_dir) {
        Ok(m) => m,
        Err(reason) => return Finding::unknown(CHECK, reason, WANT),
    };
    let current = format!(
        "{} on {} ({})",
        mount.fs_type, mount.mount_point, mount.options
    );
    let status = if mount.fs_type == "xfs" || mount.fs_type == "ext4" {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        CHECK,
        current,
        WANT,
        status,
        "put the data dir on an xfs (preferred) or ext4 filesystem",
    )
}

/// `noatime`, as Kafka and Redpanda recommend; `relatime` (the kernel's default) still writes
/// access times once a day per file, so it is a warning.
pub fn mount_options(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "fs.mount_options";
    const WANT: &str = "noatime";
    let mount = match mounts::mount_of(host, &needs.data_dir) {
        Ok(m) => m,
        Err(reason) => return Finding::unknown(CHECK, reason, WANT),
    };
    let status = if mount.options.split(',').any(|o| o == "noatime") {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        CHECK,
        format!("{} on {}", mount.options, mount.mount_point),
        WANT,
        status,
        format!(
            "mount -o remount,noatime {}; persist: add noatime to its options in /etc/fstab",
            mount.mount_point
        ),
    )
}

/// A file of `needs.ballast_bytes_min` allocated bytes (a sparse file gives no headroom).
pub fn ballast(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "fs.ballast";
    let path = needs.ballast();
    let want_bytes = needs.ballast_bytes_min;
    let want = format!(">= {want_bytes} bytes allocated at {}", path.display());
    let fallocate = format!(
        "fallocate -l {} {}",
        fallocate_size(want_bytes),
        path.display()
    );
    match host.file_size(&path) {
        Err(reason) => Finding::unknown(CHECK, reason, want),
        Ok(None) => {
            let dir = path.parent().unwrap_or(&path);
            if host.exists(dir) {
                Finding::new(CHECK, "missing", want, Status::Warn, fallocate)
            } else {
                Finding::new(
                    CHECK,
                    format!("no directory {}", dir.display()),
                    want,
                    Status::Unknown,
                    format!("mkdir -p {} && {fallocate}", dir.display()),
                )
            }
        }
        Ok(Some((allocated, len))) => {
            let mut current = format!("{allocated} bytes allocated");
            if len != allocated {
                current.push_str(&format!(" ({len} bytes long)"));
            }
            let status = if allocated >= want_bytes {
                Status::Ok
            } else {
                Status::Warn
            };
            Finding::new(
                CHECK,
                current,
                want,
                status,
                format!("rm {0} && {fallocate}", path.display()),
            )
        }
    }
}

/// `1G` when `bytes` is whole GiB, `64M` for whole MiB, else the bytes.
fn fallocate_size(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match bytes {
        b if b > 0 && b % GIB == 0 => format!("{}G", b / GIB),
        b if b > 0 && b % MIB == 0 => format!("{}M", b / MIB),
        b => b.to_string(),
    }
}
