//! CPU frequency governor: a shard's core should not clock down between bursts.

use std::collections::BTreeMap;

use crate::check::{Finding, Status};
use crate::host::Host;

const CHECK: &str = "cpu.governor";
const WANT: &str = "performance";

pub fn governor(host: &Host) -> Finding {
    let cpus: Vec<String> = host
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|n| {
            n.strip_prefix("cpu")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    let mut by_governor: BTreeMap<String, usize> = BTreeMap::new();
    let mut unreadable = 0;
    for cpu in &cpus {
        match host.read(format!(
            "/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"
        )) {
            Ok(g) if !g.is_empty() => *by_governor.entry(g).or_default() += 1,
            _ => unreadable += 1,
        }
    }
    if by_governor.is_empty() {
        let reason = if cpus.is_empty() {
            "no cpus under /sys/devices/system/cpu"
        } else {
            "no cpufreq (VM or no driver)"
        };
        return Finding::unknown(CHECK, reason, WANT);
    }
    let read = cpus.len() - unreadable;
    let current = if by_governor.len() == 1 && unreadable == 0 {
        by_governor.keys().next().cloned().unwrap_or_default()
    } else {
        let parts: Vec<String> = by_governor
            .iter()
            .map(|(g, n)| format!("{g} ({n}/{read} cpus)"))
            .collect();
        parts.join(", ")
    };
    let status = if by_governor.keys().all(|g| g == WANT) {
        Status::Ok
    } else {
        Status::Warn
    };
    Finding::new(
        CHECK,
        current,
        WANT,
        status,
        "cpupower frequency-set -g performance (or: echo performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)",
    )
}
