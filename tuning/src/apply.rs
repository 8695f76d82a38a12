//! `--apply` and `--dry-run`: sets the knobs keel-tune may change on its own (CPU governor, the
//! data disk's `nomerges` and `rq_affinity`, swappiness, transparent huge pages, aio-max-nr)
//! through the same [`Host`] the checks read, and says for each change how to undo it.
//!
//! Invariants: only a knob that was read, and is not already as wanted, is written; a knob that
//! cannot be read or written (VM, container, read-only sysfs, not root) is reported as
//! [`Outcome::CannotChange`], never as an error; a write is read back and counts as done only
//! when the knob now reads as the new value. Resource limits and the write cache are never
//! changed (see [`never_changed`]). Nothing here persists across a reboot.

use serde::Serialize;

use crate::check::Needs;
use crate::checks::{kernel_aio_need, selected};
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

/// A knob and the value wanted; `ok` says whether a current value is already acceptable.
struct Knob {
    check: &'static str,
    path: String,
    new: String,
    /// Sysfs choice lists (`always [madvise] never`) read as their bracketed value.
    choice: bool,
    ok: fn(&str, &str) -> bool,
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
        });
    }
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
            }),
            Err(reason) => cannot.push(cannot_change(check, "", "2", reason.clone())),
        }
    }
    knobs.extend([
        Knob {
            check: "vm.swappiness",
            path: "/proc/sys/vm/swappiness".into(),
            new: "1".into(),
            choice: false,
            ok: at_most,
        },
        Knob {
            check: "mm.transparent_hugepage",
            path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
            new: "madvise".into(),
            choice: true,
            ok: thp_ok,
        },
        Knob {
            check: "fs.aio-max-nr",
            path: "/proc/sys/fs/aio-max-nr".into(),
            new: kernel_aio_need(needs).to_string(),
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
        let undo = match outcome {
            Outcome::CannotChange(_) => String::new(),
            _ => format!("echo {} > {}", shell_word(&old), shell_word(&path)),
        };
        changes.push(Change {
            check: knob.check,
            path,
            old,
            new: knob.new.clone(),
            outcome,
            undo,
        });
    }
    changes.sort_by_key(|c| order(c.check));
    changes
}

fn order(check: &str) -> usize {
    [
        "cpu.governor",
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
