//! The data disk's block queue: scheduler, request merging, completion affinity, write cache.
//! The disk is found from the data dir's mount; when it cannot be (overlay, tmpfs, container),
//! every disk check says so as unknown.

use crate::check::{Finding, Needs, Status};
use crate::checks::selected;
use crate::host::Host;
use crate::mounts;

const SCHEDULER: &str = "disk.scheduler";
const NOMERGES: &str = "disk.nomerges";
const RQ_AFFINITY: &str = "disk.rq_affinity";
const WRITE_CACHE: &str = "disk.write_cache";

/// The four disk checks for the disk that holds the data dir.
pub(crate) fn all(host: &Host, needs: &Needs) -> Vec<Finding> {
    let disk =
        mounts::mount_of(host, &needs.data_dir).and_then(|m| mounts::block_device_of(host, &m));
    match disk {
        Ok(disk) => vec![
            scheduler(host, &disk),
            nomerges(host, &disk),
            rq_affinity(host, &disk),
            write_cache(host, &disk),
        ],
        Err(reason) => vec![
            Finding::unknown(SCHEDULER, reason.clone(), "none (NVMe)"),
            Finding::unknown(NOMERGES, reason.clone(), "2"),
            Finding::unknown(RQ_AFFINITY, reason.clone(), "2"),
            Finding::unknown(
                WRITE_CACHE,
                reason,
                "write through (with power-loss protection)",
            ),
        ],
    }
}

fn queue_file(disk: &str, knob: &str) -> String {
    format!("/sys/block/{disk}/queue/{knob}")
}

/// NVMe and other non-rotational disks want no scheduler (`none`; `mq-deadline` is accepted on
/// non-NVMe SSDs); spinning disks want `mq-deadline`.
pub fn scheduler(host: &Host, disk: &str) -> Finding {
    let rotational = host
        .read(queue_file(disk, "rotational"))
        .is_ok_and(|r| r == "1");
    let nvme = disk.starts_with("nvme");
    let want = if rotational { "mq-deadline" } else { "none" };
    let want_text = format!(
        "{want} ({disk}{})",
        if nvme {
            ", NVMe"
        } else if rotational {
            ", rotational"
        } else {
            ""
        }
    );
    let raw = match host.read(queue_file(disk, "scheduler")) {
        Ok(raw) => raw,
        Err(reason) => return Finding::unknown(SCHEDULER, reason, want_text),
    };
    let Some(value) = selected(&raw) else {
        return Finding::unknown(SCHEDULER, format!("unparsable: {raw:?}"), want_text);
    };
    let accepted = value == want || (!nvme && !rotational && value == "mq-deadline");
    let status = if accepted { Status::Ok } else { Status::Warn };
    Finding::new(
        SCHEDULER,
        value,
        want_text,
        status,
        format!(
            "echo {want} > {}; persist with a udev rule",
            queue_file(disk, "scheduler")
        ),
    )
}

/// Merging costs CPU on every request for no gain on NVMe: `2` turns it off.
pub fn nomerges(host: &Host, disk: &str) -> Finding {
    numeric_knob(host, disk, NOMERGES, "nomerges", 2)
}

/// `2`: complete each request on the core that issued it, the shard that owns it.
pub fn rq_affinity(host: &Host, disk: &str) -> Finding {
    numeric_knob(host, disk, RQ_AFFINITY, "rq_affinity", 2)
}

fn numeric_knob(host: &Host, disk: &str, check: &'static str, knob: &str, want: u64) -> Finding {
    let path = queue_file(disk, knob);
    let raw = match host.read(&path) {
        Ok(raw) => raw,
        Err(reason) => return Finding::unknown(check, reason, want.to_string()),
    };
    let Ok(value) = raw.parse::<u64>() else {
        return Finding::unknown(check, format!("unparsable: {raw:?}"), want.to_string());
    };
    let status = if value == want {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        check,
        raw,
        want.to_string(),
        status,
        format!("echo {want} > {path}; persist with a udev rule"),
    )
}

/// `write back` means every fsync also flushes the drive's volatile cache. Only a drive with
/// power-loss protection may be switched to `write through`; on any other it must stay.
pub fn write_cache(host: &Host, disk: &str) -> Finding {
    const WANT: &str = "write through (with power-loss protection)";
    let path = queue_file(disk, "write_cache");
    let value = match host.read(&path) {
        Ok(v) if v == "write back" || v == "write through" => v,
        Ok(v) => return Finding::unknown(WRITE_CACHE, format!("unparsable: {v:?}"), WANT),
        Err(reason) => return Finding::unknown(WRITE_CACHE, reason, WANT),
    };
    let status = if value == "write through" {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        WRITE_CACHE,
        value,
        WANT,
        status,
        format!("only if the drive has power-loss protection: echo 'write through' > {path}; otherwise leave it (each fsync pays a cache flush)"),
    )
}
