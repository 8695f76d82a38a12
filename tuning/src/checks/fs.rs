//! The data dir's filesystem: Keel's segments are tested on xfs and ext4.

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
