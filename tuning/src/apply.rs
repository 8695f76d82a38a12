//! `--apply` and `--dry-run`: sets the knobs keel-tune may change on its own (CPU governor, the
//! NVMe and NIC queue IRQs' affinity, the data disk's `nomerges` and `rq_affinity`, swappiness,
//! transparent huge pages, aio-max-nr) through the same [`Host`] the checks read, and says for
//! each change how to undo it and how to make it survive a reboot.
//!
//! Queue IRQs are changed only for a kind (NVMe, NIC) the irq check warns about: each gets one
//! core, round-robin over the cores the broker may use (see [`crate::checks::irq_spread`]).
//!
//! Invariants: only a knob that was read, and is not already as wanted, is written; a knob that
//! cannot be read or written (VM, container, read-only sysfs, not root) is reported as
//! [`Outcome::CannotChange`], never as an error; a write is read back and counts as done only
//! when the knob now reads as the new value. Resource limits and the write cache are never
//! changed (see [`never_changed`]). Nothing here persists across a reboot: each change carries a
//! hint ([`Change::persist`]) for what would.

use serde::Serialize;

use crate::check::{Needs, Status};
use crate::checks::{
    irq_affinity_path, irq_nic, irq_nvme, irq_spread, irq_spread_cores, kernel_aio_need,
    parse_cpu_list, queue_irqs, selected, Queues,
};
use crate::host::Host;
use crate::mounts;

/// Whether to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Report what would change; write nothing.
    DryRun,
    Apply,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Changed,
    /// `--dry-run`: would have been changed.
    WouldChange,
    /// Why it could not be read, written, or did not take.
    CannotChange(String),
}

/// One knob `--apply` looked at and found not as wanted (or could not look at).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub check: &'static str,
    /// The file, as written (under the host's root).
    pub path: String,
    /// Empty when it could not be read.
    pub old: String,
    pub new: String,
    pub outcome: Outcome,
    /// The command that writes `old` back; empty when nothing was or would be written.
    pub undo: String,
    /// How to make the change survive a reboot (a line for a file, or what to run at boot);
    /// empty when nothing was or would be written.
    pub persist: String,
}

impl Change {
    /// `check: old -> new` and the undo command, or why it cannot be changed here.
    pub fn render(&self) -> String {
        match &self.outcome {
            Outcome::CannotChange(why) => format!("{}: cannot change here ({why})", self.check),
            _ => format!(
                "{}: {} -> {} ({})\n  undo: {}",
                self.check, self.old, self.new, self.path, self.undo
            ),
        }
    }
}

/// The knobs that are never changed automatically, with why.
pub fn never_changed() -> [(&'static str, &'static str); 3] {
    [
        ("rlimit.memlock", "a limit belongs to the process that starts the broker; raise it there (LimitMEMLOCK=infinity in systemd, or /etc/security/limits.conf)"),
        ("rlimit.nofile", "a limit belongs to the process that starts the broker; raise it there (LimitNOFILE in systemd, or /etc/security/limits.conf)"),
        ("disk.write_cache", "write through is safe only on drives with power-loss protection, which keel-tune cannot see"),
    ]
}

/// What irqbalance does to a changed IRQ, and how to stop it; printed once after IRQ changes.
pub const IRQBALANCE_NOTE: &str = "irqbalance, if it runs, may move these IRQs back: stop it (systemctl disable --now irqbalance) or ban them (see persist)";

/// A knob and the value wanted; `ok` says whether a current value is already acceptable.
struct Knob {
    check: &'static str,
    path: String,
    new: String,
    /// Sysfs choice lists (`always [madvise] never`) read as their bracketed value.
    choice: bool,
    ok: fn(&str, &str) -> bool,
    /// How to make `new` survive a reboot.
    persist: String,
}

const SYSCTL_FILE: &str = "/etc/sysctl.d/90-keel.conf";
const UDEV_FILE: &str = "/etc/udev/rules.d/90-keel.rules";

fn sysctl_persist(key: &str, new: &str) -> String {
    format!("add `{key} = {new}` to {SYSCTL_FILE} (sysctl --system loads it)")
}

fn udev_persist(disk: &str, knob: &str, new: &str) -> String {
    format!(
        "add `ACTION==\"add|change\", SUBSYSTEM==\"block\", KERNEL==\"{disk}\", ATTR{{queue/{knob}}}=\"{new}\"` to {UDEV_FILE}"
    )
}

fn irq_persist(irq: u64) -> String {
    format!("IRQ numbers can change at boot: run keel-tune --apply at boot; keep irqbalance off it: --banirq={irq} in IRQBALANCE_ARGS (/etc/default/irqbalance or /etc/sysconfig/irqbalance)")
}

fn equal(current: &str, new: &str) -> bool {
    current == new
}

fn at_most(current: &str, new: &str) -> bool {
    matches!((current.parse::<u64>(), new.parse::<u64>()), (Ok(c), Ok(n)) if c <= n)
}

fn at_least(current: &str, new: &str) -> bool {
    matches!((current.parse::<u64>(), new.parse::<u64>()), (Ok(c), Ok(n)) if c >= n)
}

fn thp_ok(current: &str, _new: &str) -> bool {
    current == "madvise" || current == "never"
}

fn same_cpus(current: &str, new: &str) -> bool {
    matches!((parse_cpu_list(current), parse_cpu_list(new)), (Some(c), Some(n)) if c == n)
}

/// One knob per queue IRQ to move, for each kind the irq check warns about; a kind it cannot
/// read is reported, a kind it finds ok is left alone.
fn irq_knobs(host: &Host, needs: &Needs, knobs: &mut Vec<Knob>, cannot: &mut Vec<Change>) {
    let cores = irq_spread_cores(host, needs);
    let mut next = 0;
    for queues in [Queues::Nvme, Queues::Nic] {
        let check = queues.check();
        let finding = match queues {
            Queues::Nvme => irq_nvme(host, needs),
            Queues::Nic => irq_nic(host, needs),
        };
        let found = match (finding.status, queue_irqs(host, queues)) {
            (Status::Ok, _) => continue,
            (Status::Unknown, _) | (_, Err(_)) => {
                cannot.push(cannot_change(check, "", "one core each", finding.current));
                continue;
            }
            (_, Ok(found)) => found,
        };
        if cores.len() < 2 {
            let why = format!(
                "one core to spread {} queue IRQs over ({}); name the broker's cores with --cpus",
                found.placed.len(),
                cores.first().map_or("none".to_string(), u64::to_string)
            );
            cannot.push(cannot_change(check, "", "one core each", why));
            continue;
        }
        for (irq, core) in irq_spread(&found, &cores, &mut next) {
            knobs.push(Knob {
                check,
                path: irq_affinity_path(irq),
                new: core.to_string(),
                choice: false,
                ok: same_cpus,
                persist: irq_persist(irq),
            });
        }
    }
}

fn knobs(host: &Host, needs: &Needs) -> (Vec<Knob>, Vec<Change>) {
    let mut knobs = Vec::new();
    let mut cannot = Vec::new();
    let cpus: Vec<String> = host
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|n| {
            n.strip_prefix("cpu")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    let with_cpufreq = |cpu: &String| host.exists(format!("/sys/devices/system/cpu/{cpu}/cpufreq"));
    if !cpus.iter().any(with_cpufreq) {
        let why = "no cpufreq under /sys/devices/system/cpu (VM or no driver)".to_string();
        cannot.push(cannot_change("cpu.governor", "", "performance", why));
    }
    for cpu in cpus.iter().filter(|c| with_cpufreq(c)) {
        knobs.push(Knob {
            check: "cpu.governor",
            path: format!("/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"),
            new: "performance".into(),
            choice: false,
            ok: equal,
            persist: "run `cpupower frequency-set -g performance` at boot (cpupower.service: GOVERNOR=performance in /etc/default/cpupower or /etc/sysconfig/cpupower)".into(),
        });
    }
    irq_knobs(host, needs, &mut knobs, &mut cannot);
    let disk =
        mounts::mount_of(host, &needs.data_dir).and_then(|m| mounts::block_device_of(host, &m));
    for (check, knob) in [
        ("disk.nomerges", "nomerges"),
        ("disk.rq_affinity", "rq_affinity"),
    ] {
        match &disk {
            Ok(disk) => knobs.push(Knob {
                check,
                path: format!("/sys/block/{disk}/queue/{knob}"),
                new: "2".into(),
                choice: false,
                ok: equal,
                persist: udev_persist(disk, knob, "2"),
            }),
            Err(reason) => cannot.push(cannot_change(check, "", "2", reason.clone())),
        }
    }
    let aio_max_nr = kernel_aio_need(needs).to_string();
    knobs.extend([
        Knob {
            check: "vm.swappiness",
            path: "/proc/sys/vm/swappiness".into(),
            new: "1".into(),
            choice: false,
            ok: at_most,
            persist: sysctl_persist("vm.swappiness", "1"),
        },
        Knob {
            check: "mm.transparent_hugepage",
            path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
            new: "madvise".into(),
            choice: true,
            ok: thp_ok,
            persist: "boot with transparent_hugepage=madvise on the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub)".into(),
        },
        Knob {
            check: "fs.aio-max-nr",
            path: "/proc/sys/fs/aio-max-nr".into(),
            persist: sysctl_persist("fs.aio-max-nr", &aio_max_nr),
            new: aio_max_nr,
            choice: false,
            ok: at_least,
        },
    ]);
    (knobs, cannot)
}

fn cannot_change(check: &'static str, path: &str, new: &str, why: String) -> Change {
    Change {
        check,
        path: path.to_string(),
        old: String::new(),
        new: new.to_string(),
        outcome: Outcome::CannotChange(why),
        undo: String::new(),
        persist: String::new(),
    }
}

/// The value as the checks read it, or why it cannot be read.
fn read_value(host: &Host, knob: &Knob) -> Result<String, String> {
    let raw = host.read(&knob.path)?;
    let value = if knob.choice {
        selected(&raw)
    } else {
        Some(raw.as_str()).filter(|v| !v.is_empty() && !v.contains(char::is_whitespace))
    };
    value
        .map(str::to_string)
        .ok_or_else(|| format!("unparsable: {raw:?} in {}", knob.path))
}

/// Looks at every knob, and in [`Mode::Apply`] writes those not as wanted. Returns the knobs
/// that were (or would be) changed or could not be, in report order; knobs already as wanted
/// are left out.
pub fn run(host: &Host, needs: &Needs, mode: Mode) -> Vec<Change> {
    let (knobs, mut changes) = knobs(host, needs);
    for knob in &knobs {
        let old = match read_value(host, knob) {
            Ok(old) => old,
            Err(why) => {
                changes.push(cannot_change(knob.check, &knob.path, &knob.new, why));
                continue;
            }
        };
        if (knob.ok)(&old, &knob.new) {
            continue;
        }
        let path = host.path(&knob.path).display().to_string();
        let outcome = match mode {
            Mode::DryRun => Outcome::WouldChange,
            Mode::Apply => write_and_verify(host, knob),
        };
        let (undo, persist) = match outcome {
            Outcome::CannotChange(_) => (String::new(), String::new()),
            _ => (
                format!("echo {} > {}", shell_word(&old), shell_word(&path)),
                knob.persist.clone(),
            ),
        };
        changes.push(Change {
            check: knob.check,
            path,
            old,
            new: knob.new.clone(),
            outcome,
            undo,
            persist,
        });
    }
    changes.sort_by_key(|c| order(c.check));
    changes
}

fn order(check: &str) -> usize {
    [
        "cpu.governor",
        "irq.nvme",
        "irq.nic",
        "disk.nomerges",
        "disk.rq_affinity",
        "vm.swappiness",
        "mm.transparent_hugepage",
        "fs.aio-max-nr",
    ]
    .iter()
    .position(|c| *c == check)
    .unwrap_or(usize::MAX)
}

/// The distinct persistence hints of `changes`, in order, with the IRQs' irqbalance bans
/// gathered into one line.
pub fn persist_hints(changes: &[Change]) -> Vec<String> {
    let mut hints: Vec<String> = Vec::new();
    let mut banned: Vec<String> = Vec::new();
    for c in changes.iter().filter(|c| !c.persist.is_empty()) {
        if c.check.starts_with("irq.") {
            let irq = c.path.rsplit('/').nth(1).unwrap_or_default();
            banned.push(format!("--banirq={irq}"));
        } else if !hints.contains(&c.persist) {
            hints.push(c.persist.clone());
        }
    }
    if !banned.is_empty() {
        hints.push(format!(
            "IRQ numbers can change at boot: run keel-tune --apply at boot; keep irqbalance off them: IRQBALANCE_ARGS=\"{}\" in /etc/default/irqbalance (or /etc/sysconfig/irqbalance)",
            banned.join(" ")
        ));
    }
    hints
}

fn write_and_verify(host: &Host, knob: &Knob) -> Outcome {
    if let Err(why) = host.write(&knob.path, &knob.new) {
        return Outcome::CannotChange(why);
    }
    match read_value(host, knob) {
        Ok(now) if now == knob.new => Outcome::Changed,
        Ok(now) => Outcome::CannotChange(format!(
            "wrote {}, reads back {now}: {}",
            knob.new, knob.path
        )),
        Err(why) => Outcome::CannotChange(format!("wrote {}, then {why}", knob.new)),
    }
}

/// `word` quoted for a POSIX shell when it holds anything but plain path characters.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=,@".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(
            shell_word("/sys/block/nvme0n1/queue/nomerges"),
            "/sys/block/nvme0n1/queue/nomerges"
        );
        assert_eq!(shell_word("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
