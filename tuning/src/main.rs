//! `keel-tune`: checks the host against what Keel wants and prints what to change.
//! Read-only unless `--apply` (then it sets what it can, see `keel_tuning::apply`, and prints
//! how to undo each change; `--dry-run` prints the same and writes nothing). Exits 0 whatever
//! it finds or cannot change (unless `--strict` and a check fails), 2 on bad arguments.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use keel_tuning::apply::{self, Mode};
use keel_tuning::checks::{format_cpu_list, parse_cpu_list};
use keel_tuning::{iotune, report, run_all, Host, Needs, Status};

const USAGE: &str = "\
keel-tune: check the host for Keel

usage:
  keel-tune [--data-dir DIR] [--shards N] [--partitions N] [--io-memory-bytes N]
            [--ballast PATH] [--ballast-bytes N] [--cpus LIST] [--apply | --dry-run] [--json]
            [--strict] [--root DIR]

  --data-dir DIR          the broker's data dir (default ./keel-data); picks the disk and filesystem checked
  --shards N              shards the broker will run (default: the CPUs it may use, see --cpus)
  --partitions N          partitions the broker will hold (default 1000)
  --io-memory-bytes N     io.memory.bytes per shard (default 4194304)
  --ballast PATH          the ballast file (default DATA_DIR/ballast)
  --ballast-bytes N       the ballast size wanted (default 1073741824)
  --cpus LIST             the CPUs the broker may use, e.g. 0-3,8 (default: this process's affinity
                          mask; unknown under --root); shard i runs on the i-th
  --apply                 as root, set the CPU governor, queue IRQ affinity (one core each, spread),
                          nomerges, rq_affinity, swappiness, THP and fs.aio-max-nr; print each change,
                          how to undo it, and how to make it persistent (it is not)
  --dry-run               print what --apply would change, write nothing
  --json                  print JSON instead of a table
  --strict                exit 1 when a check fails
  --root DIR              read /proc and /sys under DIR instead of / (fixtures; limits stay this process's)

  keel-tune iotune [--data-dir DIR] [--duration 10s] [--out FILE] [--file-bytes-max N]

  measures the disk holding DIR (sequential write and read bandwidth, random 4 KiB read IOPS at
  queue depths 1, 4, 16, 64, random write IOPS, fdatasync latency) with a probe file that it
  removes, and writes the io-properties file `keel serve` sizes its I/O from
  --data-dir DIR          the broker's data dir (default ./keel-data); the probe file goes there
  --duration D            the whole run, split among the phases: 10s (default), 1500ms, 2m
  --out FILE              where to write (default DATA_DIR/io-properties.toml, which keel serve reads)
  --file-bytes-max N      cap on the probe file (default 1073741824; also at most 1/4 of free space)
";

struct Args {
    root: PathBuf,
    needs: Needs,
    /// `--cpus`, ascending.
    cpus: Option<Vec<u64>>,
    json: bool,
    strict: bool,
    mode: Option<Mode>,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut shards: Option<u64> = None;
    let mut args = Args {
        root: PathBuf::from("/"),
        cpus: None,
        needs: Needs {
            data_dir: PathBuf::from("keel-data"),
            shards: 1,
            partitions: Needs::PARTITIONS_DEFAULT,
            io_memory_bytes: Needs::IO_MEMORY_BYTES_DEFAULT,
            ballast_path: None,
            ballast_bytes_min: Needs::BALLAST_BYTES_DEFAULT,
        },
        json: false,
        strict: false,
        mode: None,
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--json" => args.json = true,
            "--strict" => args.strict = true,
            "--apply" => args.mode = args.mode.or(Some(Mode::Apply)),
            "--dry-run" => args.mode = Some(Mode::DryRun),
            "--ballast" => args.needs.ballast_path = Some(PathBuf::from(value()?)),
            "--ballast-bytes" => args.needs.ballast_bytes_min = number(value()?)?,
            "--root" => args.root = PathBuf::from(value()?),
            "--data-dir" => args.needs.data_dir = PathBuf::from(value()?),
            "--shards" => shards = Some(number(value()?)?.max(1)),
            "--cpus" => {
                let list = value()?;
                let cpus = parse_cpu_list(&list)
                    .ok_or_else(|| format!("--cpus: not a cpu list (e.g. 0-3,8): {list}"))?;
                args.cpus = Some(cpus.into_iter().collect());
            }
            "--partitions" => args.needs.partitions = number(value()?)?,
            "--io-memory-bytes" => args.needs.io_memory_bytes = number(value()?)?,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    // As the broker does with smp = 0: one shard per core it may use.
    args.needs.shards = shards.unwrap_or_else(|| {
        let allowed = args.host().allowed_cpus().map(|c| c.len() as u64);
        allowed
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u64)
            })
            .unwrap_or(1)
            .max(1)
    });
    Ok(args)
}

impl Args {
    fn host(&self) -> Host {
        let host = Host::at(&self.root);
        match &self.cpus {
            Some(cpus) => host.with_cpus(cpus.iter().copied()),
            None => host,
        }
    }
}

/// The data dir as an absolute path on the host; on the live host, symlinks resolved as far as
/// the path exists.
fn absolute_data_dir(root: &Path, dir: &Path) -> PathBuf {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(dir)
    };
    if root != Path::new("/") {
        return abs;
    }
    abs.ancestors()
        .find_map(|a| {
            let real = std::fs::canonicalize(a).ok()?;
            let rest = abs.strip_prefix(a).ok()?;
            Some(if rest.as_os_str().is_empty() {
                real
            } else {
                real.join(rest)
            })
        })
        .unwrap_or(abs)
}

/// What `--apply` / `--dry-run` did, then what it never changes and why.
fn render_changes(mode: Mode, changes: &[apply::Change]) -> String {
    let mut out = String::new();
    match mode {
        Mode::DryRun => out.push_str("dry run: nothing is written\n"),
        // SAFETY: geteuid has no preconditions and cannot fail.
        Mode::Apply if unsafe { libc::geteuid() } != 0 => {
            out.push_str("not root: most writes will be refused\n")
        }
        Mode::Apply => {}
    }
    if changes.is_empty() {
        out.push_str("nothing to change\n");
    }
    for change in changes {
        out.push_str(&change.render());
        out.push('\n');
    }
    let irq_moved = changes
        .iter()
        .any(|c| c.check.starts_with("irq.") && !c.undo.is_empty());
    if irq_moved {
        out.push_str(&format!("note: {}\n", apply::IRQBALANCE_NOTE));
    }
    let hints = apply::persist_hints(changes);
    if !hints.is_empty() {
        out.push_str("to persist (none of this survives a reboot):\n");
        for hint in hints {
            out.push_str(&format!("  {hint}\n"));
        }
    }
    for (check, why) in apply::never_changed() {
        out.push_str(&format!("{check}: not changed automatically: {why}\n"));
    }
    out.push('\n');
    out
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if argv.first().map(String::as_str) == Some("iotune") {
        return iotune_main(&argv[1..]);
    }
    let mut args = match parse_args(&argv) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("keel-tune: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    args.needs.data_dir = absolute_data_dir(&args.root, &args.needs.data_dir);
    args.needs.ballast_path = args
        .needs
        .ballast_path
        .take()
        .map(|p| absolute_data_dir(&args.root, &p));
    let host = args.host();
    let changes = args.mode.map(|mode| apply::run(&host, &args.needs, mode));
    let findings = run_all(&host, &args.needs);
    if args.json {
        println!(
            "{}",
            report::json_with_changes(&host, &args.needs, &findings, changes.as_deref())
        );
    } else {
        if let (Some(mode), Some(changes)) = (args.mode, &changes) {
            print!("{}", render_changes(mode, changes));
        }
        println!(
            "data dir {} · {} shards on cores {} · {} partitions",
            args.needs.data_dir.display(),
            args.needs.shards,
            format_cpu_list(args.needs.shard_cores(&host)),
            args.needs.partitions
        );
        print!("{}", report::table(&findings));
    }
    if args.strict && findings.iter().any(|f| f.status == Status::Fail) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `keel-tune iotune`: exits 0 with the file written, 1 when the disk could not be measured,
/// 2 on bad arguments.
fn iotune_main(argv: &[String]) -> ExitCode {
    let bad = |e: String| {
        eprintln!("keel-tune iotune: {e}\n\n{USAGE}");
        ExitCode::from(2)
    };
    let mut data_dir = PathBuf::from("keel-data");
    let mut duration = iotune::DURATION_DEFAULT;
    let mut out: Option<PathBuf> = None;
    let mut file_bytes_max = iotune::FILE_BYTES_MAX_DEFAULT;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return bad(format!("{flag} needs a value (or is unknown)"));
        };
        match flag.as_str() {
            "--data-dir" => data_dir = PathBuf::from(value),
            "--out" => out = Some(PathBuf::from(value)),
            "--duration" => match iotune::parse_duration(value) {
                Ok(d) => duration = d,
                Err(e) => return bad(e),
            },
            "--file-bytes-max" => match value.parse::<u64>() {
                Ok(n) => file_bytes_max = n,
                Err(_) => return bad(format!("--file-bytes-max: not a number: {value}")),
            },
            other => return bad(format!("unknown argument: {other}")),
        }
    }
    let data_dir = absolute_data_dir(Path::new("/"), &data_dir);
    let out = out.unwrap_or_else(|| data_dir.join(iotune::FILE_NAME));
    eprintln!(
        "keel-tune iotune: measuring the disk under {} for about {:.1}s",
        data_dir.display(),
        duration.as_secs_f64()
    );
    let options = iotune::Options {
        data_dir,
        duration,
        file_bytes_max,
    };
    let props = match iotune::run(&options) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("keel-tune iotune: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = props.to_toml();
    if let Err(e) = std::fs::write(&out, &text) {
        eprintln!("keel-tune iotune: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    print!("{text}");
    eprintln!("keel-tune iotune: wrote {}", out.display());
    ExitCode::SUCCESS
}
