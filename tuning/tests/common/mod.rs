//! Shared by the keel-tune test binaries.

/// Every check keel-tune runs, in report order.
pub const ALL_CHECKS: [&str; 16] = [
    "cpu.governor",
    "irq.nvme",
    "irq.nic",
    "disk.scheduler",
    "disk.nomerges",
    "disk.rq_affinity",
    "disk.write_cache",
    "vm.swappiness",
    "mm.transparent_hugepage",
    "clocksource",
    "fs.aio-max-nr",
    "rlimit.memlock",
    "rlimit.nofile",
    "fs.type",
    "fs.mount_options",
    "fs.ballast",
];
