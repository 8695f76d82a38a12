//! CPU accounting: keel-bench's own CPU (getrusage of the process or of one thread), a
//! local target's CPU from `/proc/PID/stat`, the io_uring workers a thread started, and the
//! one division every report uses, CPU seconds per GB moved.
//!
//! Readers of the kernel's text never panic: a missing or malformed `/proc` file is an error
//! (or skipped, for the worker sum), and every directory walk is bounded by a count. Called on
//! the caller's thread; [`this_thread`] measures whichever thread calls it.

use std::path::Path;

use anyhow::{bail, Context};

/// GB as the reports count it: 10^9 bytes.
pub const GB: f64 = 1_000_000_000.0;
/// Threads of this process looked at when summing io_uring workers.
const TASKS_MAX: usize = 4096;

/// CPU seconds by mode, at one instant (cumulative) or over an interval (a difference).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTimes {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }

    /// `self - before`, each mode at least 0 (a counter never runs backwards; if it seems to,
    /// the interval used nothing measurable).
    pub fn since(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: (self.user_s - before.user_s).max(0.0),
            system_s: (self.system_s - before.system_s).max(0.0),
        }
    }

    pub fn plus(&self, other: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
        }
    }
}

/// CPU seconds per GB moved; None when nothing moved (or a figure is not a number), so a
/// report prints "-" instead of dividing by zero.
pub fn per_gb(cpu_s: f64, bytes_moved: u64) -> Option<f64> {
    if bytes_moved == 0 || !cpu_s.is_finite() || cpu_s < 0.0 {
        return None;
    }
    Some(cpu_s / (bytes_moved as f64 / GB))
}

/// `num / den` when both are figures and `den` is not 0.
pub fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    let (num, den) = (num?, den?);
    let r = num / den;
    (den != 0.0 && r.is_finite()).then_some(r)
}

fn rusage(who: libc::c_int) -> CpuTimes {
    // SAFETY: getrusage writes into a valid, zeroed local struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return CpuTimes::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    CpuTimes {
        user_s: tv(u.ru_utime),
        system_s: tv(u.ru_stime),
    }
}

/// CPU this process (every thread, live and exited) has used so far.
pub fn this_process() -> CpuTimes {
    rusage(libc::RUSAGE_SELF)
}

/// CPU the calling thread has used so far.
pub fn this_thread() -> CpuTimes {
    rusage(libc::RUSAGE_THREAD)
}

/// The calling thread's kernel id.
pub fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Clock ticks per second, the unit of `/proc/*/stat` times.
pub fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0 // USER_HZ on every Linux architecture
    }
}

/// One `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) line: the command name and the user
/// and system times in clock ticks (fields 2, 14 and 15).
#[derive(Clone, Debug, PartialEq)]
pub struct ProcStat {
    pub comm: String,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
}

/// Parses a stat line. The name is between the first '(' and the LAST ')': it may itself hold
/// spaces and parentheses, so the numbered fields are counted from after that last ')'.
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = text[open + 1..close].to_string();
    // After ") " come field 3 (state), 4, ...; field 14 is the 12th of them.
    let mut fields = text[close + 1..].split_whitespace();
    let utime_ticks = fields.nth(11)?.parse().ok()?;
    let stime_ticks = fields.next()?.parse().ok()?;
    Some(ProcStat {
        comm,
        utime_ticks,
        stime_ticks,
    })
}

fn ticks_to_times(stat: &ProcStat, ticks_per_s: f64) -> CpuTimes {
    CpuTimes {
        user_s: stat.utime_ticks as f64 / ticks_per_s,
        system_s: stat.stime_ticks as f64 / ticks_per_s,
    }
}

fn read_stat(path: &Path) -> anyhow::Result<ProcStat> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match parse_proc_stat(&text) {
        Some(stat) => Ok(stat),
        None => bail!("{}: not a stat line: {text:?}", path.display()),
    }
}

/// CPU process `pid` (all its threads, live and exited; not its children) has used so far.
pub fn read_pid(pid: u32) -> anyhow::Result<CpuTimes> {
    let stat = read_stat(&Path::new("/proc").join(pid.to_string()).join("stat"))?;
    Ok(ticks_to_times(&stat, clock_ticks_per_s()))
}

/// The io_uring workers one thread of this process started, with the CPU each used so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoWorkers(Vec<(String, CpuTimes)>);

impl IoWorkers {
    /// What the workers used since `before`: a worker counts from zero if it started since.
    /// A worker that exited in between is missed (workers live while there is work, so that
    /// is the idle tail of an interval at most).
    pub fn since(&self, before: &IoWorkers) -> CpuTimes {
        let zero = CpuTimes::default();
        self.0.iter().fold(CpuTimes::default(), |sum, (task, now)| {
            let then = before
                .0
                .iter()
                .find(|(t, _)| t == task)
                .map_or(&zero, |(_, t)| t);
            sum.plus(&now.since(then))
        })
    }
}

/// The io_uring workers thread `tid` of this process started: the kernel runs what cannot
/// complete inline (fdatasync above all) on threads named `iou-wrk-<tid>`, whose CPU counts
/// in the process's but not in the thread's own getrusage. Unreadable entries are skipped.
pub fn io_workers_of(tid: i32) -> IoWorkers {
    let name = format!("iou-wrk-{tid}");
    let ticks_per_s = clock_ticks_per_s();
    let mut workers = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return IoWorkers(workers);
    };
    for entry in dir.take(TASKS_MAX).flatten() {
        if let Ok(stat) = read_stat(&entry.path().join("stat")) {
            if stat.comm == name {
                let task = entry.file_name().to_string_lossy().into_owned();
                workers.push((task, ticks_to_times(&stat, ticks_per_s)));
            }
        }
    }
    IoWorkers(workers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SELF_STAT: &str = "4242 (keel) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 3 0 100 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn parses_utime_and_stime() {
        let s = parse_proc_stat(SELF_STAT).unwrap();
        assert_eq!(s.comm, "keel");
        assert_eq!((s.utime_ticks, s.stime_ticks), (250, 75));
        let t = ticks_to_times(&s, 100.0);
        assert_eq!(
            t,
            CpuTimes {
                user_s: 2.5,
                system_s: 0.75
            }
        );
    }

    #[test]
    fn names_with_spaces_and_parentheses() {
        let odd = "77 (a b) c) ) R 1 77 77 0 -1 0 0 0 0 0 9 4 0 0 20 0 1 0 5 0 0";
        let s = parse_proc_stat(odd).unwrap();
        assert_eq!(s.comm, "a b) c) ");
        assert_eq!((s.utime_ticks, s.stime_ticks), (9, 4));
        // A name that looks like fields must not shift them.
        let tricky = "8 (1 2 3 4 5 6 7 8 9 10 11 12 13) S 1 8 8 0 -1 0 0 0 0 0 31 41 0 0";
        let s = parse_proc_stat(tricky).unwrap();
        assert_eq!((s.utime_ticks, s.stime_ticks), (31, 41));
    }

    #[test]
    fn malformed_stat_lines_are_none() {
        for bad in [
            "",
            "4242",
            "4242 keel S 1 2 3 4 5 6 7 8 9 10 11 12 13",
            ") 4242 (keel S 1 2 3",
            "4242 (keel) S 1 2 3",
            "4242 (keel) S 1 4242 4242 0 -1 0 0 0 0 0 x 75",
            "4242 (keel) S 1 4242 4242 0 -1 0 0 0 0 0 250 -75",
            "4242 (keel) S 1 4242 4242 0 -1 0 0 0 0 0 250",
        ] {
            assert_eq!(parse_proc_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_this_process_from_proc() {
        // Burn a little CPU so the counters are above zero at 100 ticks/s.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let t = read_pid(std::process::id()).unwrap();
        assert!(t.total_s() > 0.0, "{t:?}");
        assert!(this_process().total_s() >= this_thread().total_s());
        assert!(read_pid(u32::MAX).is_err());
    }

    #[test]
    fn cpu_per_gb_and_ratio() {
        assert_eq!(per_gb(2.0, 4_000_000_000), Some(0.5));
        assert_eq!(per_gb(3.0, 1_000_000_000), Some(3.0));
        assert_eq!(
            per_gb(1.0, 0),
            None,
            "0 bytes moved must not divide by zero"
        );
        assert_eq!(per_gb(f64::NAN, 1), None);
        assert_eq!(per_gb(-1.0, 1), None);
        assert_eq!(per_gb(0.0, 1), Some(0.0));
        assert_eq!(ratio(Some(3.0), Some(1.5)), Some(2.0));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
        let a = CpuTimes {
            user_s: 3.0,
            system_s: 1.0,
        };
        let b = CpuTimes {
            user_s: 1.0,
            system_s: 2.0,
        };
        assert_eq!(
            a.since(&b),
            CpuTimes {
                user_s: 2.0,
                system_s: 0.0
            }
        );
        assert_eq!(a.plus(&b).total_s(), 7.0);
    }

    #[test]
    fn io_workers_count_per_worker() {
        let t = |s: f64| CpuTimes {
            user_s: 0.0,
            system_s: s,
        };
        let before = IoWorkers(vec![("10".into(), t(1.0)), ("11".into(), t(5.0))]);
        // 10 grew by 2, 11 exited (missed), 12 is new (counts from zero).
        let after = IoWorkers(vec![("10".into(), t(3.0)), ("12".into(), t(0.5))]);
        assert_eq!(after.since(&before), t(2.5));
        assert_eq!(IoWorkers::default().since(&before), t(0.0));
        // No thread of this process is named after a thread id that does not exist.
        assert_eq!(io_workers_of(-1), IoWorkers::default());
    }
}
