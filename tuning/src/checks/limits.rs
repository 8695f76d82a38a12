//! Resource limits of the process that will run the broker: RLIMIT_MEMLOCK for glommio's
//! registered io_uring memory, RLIMIT_NOFILE for segment files and connections.
//! A soft limit below the need but a hard limit above it is a warning: the broker raises its own
//! soft limit at start.

use crate::check::{Finding, Needs, Status};
use crate::host::{Host, Resource, Rlimit};

/// glommio registers each shard's io memory with its three io_uring rings (see the broker's main).
pub const IO_RINGS_PER_SHARD: u64 = 3;
/// glommio's floor for io memory per shard; below it the broker refuses to start.
pub const IO_MEMORY_BYTES_MIN: u64 = 65536;
/// Open files per partition: a few segments' `.log`, `.index` and `.timeindex`.
pub const FILES_PER_PARTITION: u64 = 8;
/// Files left for connections, sockets and the metadata log.
pub const FILES_MARGIN: u64 = 16384;

fn show(r: Rlimit) -> String {
    format!("soft {} / hard {}", r.soft, r.hard)
}

pub fn memlock(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "rlimit.memlock";
    let need = needs.io_memory_bytes * IO_RINGS_PER_SHARD * needs.shards;
    let floor = IO_MEMORY_BYTES_MIN * IO_RINGS_PER_SHARD * needs.shards;
    let want = format!(
        ">= {need} bytes ({} shards x {IO_RINGS_PER_SHARD} x {}), or unlimited",
        needs.shards, needs.io_memory_bytes
    );
    let Some(r) = host.rlimit(Resource::Memlock) else {
        return Finding::unknown(CHECK, "getrlimit failed", want);
    };
    let (status, fix) = if r.soft.allows(need) {
        (Status::Ok, String::new())
    } else if r.hard.allows(need) {
        (
            Status::Warn,
            "the broker raises its soft limit at start; or: ulimit -l unlimited".to_string(),
        )
    } else if r.hard.allows(floor) {
        (Status::Warn, "the broker will shrink io.memory.bytes to fit; raise it: LimitMEMLOCK=infinity (systemd) or memlock in /etc/security/limits.conf".to_string())
    } else {
        (Status::Fail, "below glommio's floor: the broker will not start; LimitMEMLOCK=infinity (systemd) or memlock in /etc/security/limits.conf".to_string())
    };
    Finding::new(CHECK, show(r), want, status, fix)
}

pub fn nofile(host: &Host, needs: &Needs) -> Finding {
    const CHECK: &str = "rlimit.nofile";
    let need = needs.partitions * FILES_PER_PARTITION + FILES_MARGIN;
    let want = format!(
        ">= {need} ({} partitions x {FILES_PER_PARTITION} + {FILES_MARGIN})",
        needs.partitions
    );
    let Some(r) = host.rlimit(Resource::Nofile) else {
        return Finding::unknown(CHECK, "getrlimit failed", want);
    };
    let (status, fix) = if r.soft.allows(need) {
        (Status::Ok, String::new())
    } else if r.hard.allows(need) {
        (
            Status::Warn,
            format!("ulimit -n {need} before starting the broker, or LimitNOFILE={need} (systemd)"),
        )
    } else {
        (
            Status::Fail,
            format!("LimitNOFILE={need} (systemd) or nofile in /etc/security/limits.conf"),
        )
    };
    Finding::new(CHECK, show(r), want, status, fix)
}
