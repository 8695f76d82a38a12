//! Kernel knobs: swappiness, transparent huge pages, clocksource, aio-max-nr.

use crate::check::{Finding, Needs, Status};
use crate::checks::selected;
use crate::host::Host;

/// aio events each shard may hold in flight (glommio's rings and any libaio fallback).
pub const AIO_EVENTS_PER_SHARD: u64 = 1024;
/// aio events left for the rest of the host.
pub const AIO_EVENTS_MARGIN: u64 = 4096;

pub fn swappiness(host: &Host) -> Finding {
    const CHECK: &str = "vm.swappiness";
    const WANT: &str = "<= 1";
    let raw = match host.read("/proc/sys/vm/swappiness") {
        Ok(raw) => raw,
        Err(reason) => return Finding::unknown(CHECK, reason, WANT),
    };
    let Ok(value) = raw.parse::<u64>() else {
        return Finding::unknown(CHECK, format!("unparsable: {raw:?}"), WANT);
    };
    let status = if value <= 1 { Status::Ok } else { Status::Warn };
    Finding::new(
        CHECK,
        raw,
        WANT,
        status,
        "sysctl -w vm.swappiness=1; persist: echo vm.swappiness=1 > /etc/sysctl.d/90-keel.conf",
    )
}

pub fn transparent_hugepages(host: &Host) -> Finding {
    const CHECK: &str = "mm.transparent_hugepage";
    const WANT: &str = "madvise or never";
    let raw = match host.read("/sys/kernel/mm/transparent_hugepage/enabled") {
        Ok(raw) => raw,
        Err(reason) => return Finding::unknown(CHECK, reason, WANT),
    };
    let Some(value) = selected(&raw) else {
        return Finding::unknown(CHECK, format!("unparsable: {raw:?}"), WANT);
    };
    let status = if value == "madvise" || value == "never" {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        CHECK,
        value,
        WANT,
        status,
        "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled; persist: transparent_hugepage=madvise on the kernel command line",
    )
}

pub fn clocksource(host: &Host) -> Finding {
    const CHECK: &str = "clocksource";
    const WANT: &str = "tsc";
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    let value = match host.read(format!("{DIR}/current_clocksource")) {
        Ok(v) if !v.is_empty() => v,
        Ok(_) => return Finding::unknown(CHECK, "empty", WANT),
        Err(reason) => return Finding::unknown(CHECK, reason, WANT),
    };
    let status = if value == WANT {
        Status::Ok
    } else {
        Status::Warn
    };
    let tsc_available = host
        .read(format!("{DIR}/available_clocksource"))
        .is_ok_and(|a| a.split_whitespace().any(|c| c == WANT));
    let fix = if tsc_available {
        format!("echo tsc > {DIR}/current_clocksource; persist: clocksource=tsc on the kernel command line")
    } else {
        "tsc is not offered here (see available_clocksource); on a VM, choose an instance type with a stable tsc".to_string()
    };
    Finding::new(CHECK, value, WANT, status, fix)
}

/// The `fs.aio-max-nr` the shards need, with the margin for the rest of the host.
pub fn aio_need(needs: &Needs) -> u64 {
    needs.shards * AIO_EVENTS_PER_SHARD + AIO_EVENTS_MARGIN
}

pub fn aio_max_nr(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "fs.aio-max-nr";
    let need = aio_need(needs);
    let want = format!(
        ">= {need} ({} shards x {AIO_EVENTS_PER_SHARD} + {AIO_EVENTS_MARGIN})",
        needs.shards
    );
    let raw = match host.read("/proc/sys/fs/aio-max-nr") {
        Ok(raw) => raw,
        Err(reason) => return Finding::unknown(CHECK, reason, want),
    };
    let Ok(value) = raw.parse::<u64>() else {
        return Finding::unknown(CHECK, format!("unparsable: {raw:?}"), want);
    };
    let status = if value >= need {
        Status::Ok
    } else {
        Status::Fail
    };
    Finding::new(
        CHECK,
        raw,
        want,
        status,
        format!("sysctl -w fs.aio-max-nr={need}; persist: echo fs.aio-max-nr={need} > /etc/sysctl.d/90-keel.conf"),
    )
}
